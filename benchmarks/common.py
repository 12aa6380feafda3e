"""Shared benchmark helpers: machine/library facts, SQuAD loading, question splits, the SQuAD-open-small store,
timing, result files and figures. Drivers import this module (and each other never)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dphr_haystack.model.registry import DEFAULT_MODEL

if TYPE_CHECKING:
    import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
SQUAD_DEV = SHARED_DATA / "squad" / "dev-v1.1-public.json.gz"
SQUAD_TRAIN = SHARED_DATA / "squad" / "train-v1.1-rebuilt.json.gz"
RESULTS = ROOT / "benchmarks" / "results"
# The SQuAD-open-small build (dense embeddings, phrase indexes), shared by the benchmarks that query it.
SQUAD_OPEN_SMALL_CACHE = ROOT / "benchmarks" / "cache" / "squad-open-small"


def machine() -> dict[str, Any]:
    """Where and with what a benchmark ran."""
    import faiss
    import numpy
    import torch
    import transformers

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "faiss": faiss.__version__,
        "numpy": numpy.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def model_id(name: str) -> str | None:
    """A short digest of a shipped model's stored tensors (names, dtypes, shapes and bytes, in name order), so
    results can tell which shipped model they measured; ``None`` for directories and untrained models. The
    tensors, not the files: safetensors may order a file's header differently each time the same weights are saved.
    """
    import hashlib

    import torch
    from safetensors.torch import load_file

    from dphr_haystack.model.registry import is_shipped_name, shipped_model_path

    if not is_shipped_name(name):
        return None
    files = sorted(shipped_model_path(name).glob("model*.safetensors"))
    if not files:
        return None
    tensors = {key: value for file in files for key, value in load_file(str(file)).items()}
    digest = hashlib.sha256()
    for key in sorted(tensors):
        value = tensors[key].contiguous()
        digest.update(f"{key}|{value.dtype}|{tuple(value.shape)}|".encode())
        digest.update(value.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:12]


def squad_passages(path: Path = SQUAD_DEV, limit: int | None = None) -> tuple[list[dict], list[dict]]:
    """SQuAD paragraphs as passages, and their questions (with the gold passage id and answers)."""
    if not path.is_file():
        raise SystemExit(f"SQuAD data not found at {path}: this benchmark needs ../shared/data")
    from dphr_haystack._util.io import read_json
    from dphr_haystack.corpus import squad_paragraphs

    passages, questions = [], []
    for passage, para in squad_paragraphs(read_json(path), path):
        passages.append(passage)
        for qa in para.get("qas", []):
            questions.append(
                {
                    "question": qa["question"],
                    "answers": [a["text"] for a in qa["answers"]],
                    "passage_id": passage["id"],
                }
            )
        if limit and len(passages) >= limit:
            return passages, questions
    return passages, questions


def default_config(max_length: int, stride: int):
    """The shipped default model's config with windows of ``max_length`` / ``stride`` (and nothing trained)."""
    from dphr_haystack.model.config import CONFIG_FILE, PhraseModelConfig
    from dphr_haystack.model.registry import DEFAULT_MODEL, shipped_model_path

    config = PhraseModelConfig.load(shipped_model_path(DEFAULT_MODEL) / CONFIG_FILE)
    return dataclasses.replace(
        config, max_passage_length=max_length, passage_stride=stride, calibration=None, filter_threshold=None
    )


def base_installed(base: str) -> bool:
    """Whether the base model ``base`` (``minilm``, ``mpnet`` or a directory) can be found here."""
    from dphr_haystack.errors import ModelLoadError
    from dphr_haystack.model.registry import resolve_base

    try:
        return Path(resolve_base(base)).is_dir()
    except (ImportError, ModelLoadError):
        return False


def parse_readers(values: Sequence[str], option: str = "--reader") -> dict[str, str]:
    """``option``'s values, ``DIR`` or ``LABEL=DIR``, as ``{label: DIR}`` (one unlabelled reader: ``reader``)."""
    readers: dict[str, str] = {}
    for value in values:
        label, sep, path = value.partition("=")
        if not sep:
            label, path = ("reader" if len(values) == 1 else Path(value).name), value
        if not label or not path or label in readers:
            raise ValueError(f"{option} {value!r}: give DIR or LABEL=DIR, each label once")
        readers[label] = path
    return readers


def percentiles(values_ms: list[float]) -> dict[str, float]:
    import numpy as np

    arr = np.asarray(values_ms)
    return {
        "p50_ms": float(np.percentile(arr, 50)),
        "p95_ms": float(np.percentile(arr, 95)),
        "mean_ms": float(arr.mean()),
    }


def proc_memory() -> dict[str, float]:
    """VmRSS / VmHWM (peak) / RssAnon / RssFile of this process in MiB, from /proc/self/status."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile", "VmHWM", "VmRSS"):
            out[key] = int(value.split()[0]) / 1024
    return out


def driver_module() -> str:
    """The dotted name of the running driver (``benchmarks.speed.core``), as ``python -m`` is given it."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        return spec.name
    script = Path(sys.argv[0]).resolve().with_suffix("")
    try:
        return ".".join(script.relative_to(ROOT).parts)
    except ValueError:
        return f"benchmarks.{script.name}"


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def finish_result(
    name: str, result: dict[str, Any], markdown: Callable[[dict], str], plot: Callable[[dict, Path], None]
) -> Path:
    """Record the command, the end load average and the markdown, write the JSON and its plot, print the table."""
    result.setdefault("command", " ".join([".venv/bin/python -m", driver_module(), *sys.argv[1:]]))
    result["load_average_end"] = os.getloadavg()
    path = write_result(name, result)  # the measurements first: a rendering error must not lose a long run
    result["markdown"] = markdown(result)
    write_result(name, result)
    plot(result, path.with_suffix(".png"))
    print(result["markdown"])
    print(f"wrote {path} and {path.with_suffix('.png')} in {result['seconds'] / 60:.1f} min")
    return path


# ----------------------------------------------------------------------------- held-out validation data
VALIDATION_PARAGRAPHS = 427  # the first 8 dev-public articles
KS = (1, 5, 20)


# ----------------------------------------------------------------------------- data
def validation_data(questions: int):
    """The held-out validation articles and up to ``questions`` evenly spaced distinct questions about them."""
    from train.data import load_squad
    from train.validation import unique_questions

    data = load_squad(SQUAD_DEV, VALIDATION_PARAGRAPHS, questions)
    return data, unique_questions(data.examples)


def gold_window_spans(model, data, examples, questions: int | None) -> dict[str, float]:
    """Gold-window span EM / F1 (%) of ``model`` (``train.reader.span_metrics``, the reader stage's measure: the best
    span of each answerable window of the question's own paragraph, cut by the model's window settings, against the
    gold span) for ``questions`` evenly spaced ``examples`` of ``data`` (None or 0: all), with the seconds taken."""
    import numpy as np

    from train.data import PassageWindows, RCData, build_features
    from train.reader import phrase_model_logits, span_metrics

    started = time.perf_counter()
    picked = list(examples)
    if questions and questions < len(picked):  # evenly spaced, as train.data.load_squad caps questions
        picked = [picked[i] for i in sorted(set(np.linspace(0, len(picked) - 1, questions).round().astype(int)))]
    gold = RCData(data.passages, picked)
    features = build_features(gold, PassageWindows(model.tokenizer, model.config, gold.passages))
    return {
        **span_metrics(phrase_model_logits(model), gold, features, model.tokenizer, model.config),
        "questions": len(picked),
        "seconds": time.perf_counter() - started,
    }


# The first 8 dev-public articles (by file order) are held out for model selection; the benchmark never asks
# their questions (their paragraphs stay in the corpus).
VALIDATION_ARTICLES = 8


def validation_titles() -> list[str]:
    """Titles of the held-out dev-public articles."""
    from dphr_haystack._util.io import read_json

    return [a["title"] for a in read_json(SQUAD_DEV)["data"][:VALIDATION_ARTICLES]]


def squad_open_small_questions(limit: int | None, seed: int = 0) -> list:
    """The SQuAD-open-small questions: dev-public questions outside the held-out validation articles, ``limit`` of
    them sampled with ``seed`` (the sample every SQuAD-open-small benchmark asks)."""
    from dphr_haystack.evaluation import read_questions

    return read_questions(SQUAD_DEV, limit=limit, seed=seed, exclude_titles=set(validation_titles()))


def held_out_questions(limit: int, seed: int = 0) -> list:
    """``limit`` dev-public questions of the held-out validation articles (whose paragraphs SQuAD-open-small holds),
    sampled with ``seed``: questions to choose settings on, disjoint from :func:`squad_open_small_questions`."""
    import random

    from dphr_haystack.evaluation import read_questions

    titles = set(validation_titles())
    examples = [ex for ex in read_questions(SQUAD_DEV) if ex.title in titles]
    return random.Random(seed).sample(examples, min(limit, len(examples)))


def hit_scores(examples, answers: list | None, passages: list | None, top_k: int) -> dict[str, float]:
    """EM@1 / F1@1 of each question's top phrase and passage acc@1 / acc@``top_k`` of its passage ranking, from
    ``PhraseSearcher`` hits (one list per question; ``None``: not measured), by ``dphr_haystack.evaluation``'s
    rules."""
    from dphr_haystack.evaluation import short_metrics

    results = hit_results(examples, answers, passages, top_k)
    # question_result keeps the first top_k passages, so acc@top_k counts any hit among them
    return short_metrics(results, ks=(1, top_k), has_answers=answers is not None, has_passages=passages is not None)


def confidence_scores(examples, answers: list) -> dict[str, float]:
    """ECE and AUROC right vs wrong of each question's top phrase answer's confidence (``PhraseSearcher`` phrase
    hits, one list per question; a question without an answer counts as a wrong one at confidence 0), and the ECE a
    perfectly calibrated confidence would show on as many questions (``ece_if_calibrated``)."""
    from dphr_haystack.answers import exact_match
    from dphr_haystack.fitting import auroc, calibrated_ece, expected_calibration_error

    tops = [hits[0] if hits else None for hits in answers]
    confidence = [float(t.confidence) if t is not None and t.confidence is not None else 0.0 for t in tops]
    right = [t is not None and exact_match(t.text, ex.answers) for t, ex in zip(tops, examples, strict=True)]
    return {
        "ece": expected_calibration_error(confidence, right),
        "ece_if_calibrated": calibrated_ece(confidence),
        "auroc_right_vs_wrong": auroc(confidence, right),
    }


def hit_results(examples, answers: list | None, passages: list | None, top_k: int) -> list:
    """One ``dphr_haystack.evaluation`` question result per example from ``PhraseSearcher`` hits (what
    :func:`hit_scores` averages; ``question_metrics`` gives them per question)."""
    from dphr_haystack.evaluation import question_result

    return [
        question_result(
            example,
            [(h.text, h.score, h.passage_id) for h in (answers[i] if answers is not None else [])],
            [(h.passage_id, h.score, h.text) for h in (passages[i] if passages is not None else [])],
            0.0,
            top_k,
        )
        for i, example in enumerate(examples)
    ]


def filter_digest(model) -> str:
    """The first 8 hex digits of a SHA-256 of the token filter's weights (which tokens an index keeps)."""
    import hashlib

    digest = hashlib.sha256()
    for name, tensor in sorted(model.filter_linear.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:8]


def phrase_cache(model, cache: Path) -> Path:
    """Where ``model``'s phrase index lives: one per phrase encoder, filter threshold and (when it filters) token
    filter, so models that differ only on the query side (query-side fine-tuning) share it. The untrained
    ``minilm`` keeps ``phrases/``."""
    if (
        model.config.base_model.lower() == "minilm"
        and not model.config.filter_threshold
        and (cache / "phrases").is_dir()
        and model.phrase_fingerprint() == _manifest_fingerprint(cache / "phrases")
    ):
        return cache / "phrases"
    if model.config.filter_threshold is None:
        return cache / f"phrases-{model.phrase_fingerprint()[:12]}-filter-none"
    threshold = f"{model.config.filter_threshold:g}-{filter_digest(model)}"
    return cache / f"phrases-{model.phrase_fingerprint()[:12]}-filter-{threshold}"


def _manifest_fingerprint(path: Path) -> str | None:
    from dphr_haystack.index.phrase_index import MANIFEST

    try:
        return json.loads((path / MANIFEST).read_text())["model_fingerprint"]
    except (OSError, ValueError, KeyError):
        return None


# ----------------------------------------------------------------------------- the SQuAD-open-small store
# Built (cached, resumable) by quality/squad_open_small.py and queried by the benchmarks that reuse its cache.
DENSE_CHUNK = 2048


def build_dense(docs, out: Path) -> dict:
    """MiniLM passage embeddings in chunks of DENSE_CHUNK documents (a finished chunk is never redone)."""
    import numpy as np

    from dphr_haystack.nodes import MiniLMEmbeddingRetriever

    out.mkdir(parents=True, exist_ok=True)
    retriever = MiniLMEmbeddingRetriever(document_store=None, batch_size=64, progress_bar=False)
    chunks = range(0, len(docs), DENSE_CHUNK)
    start, encoded = time.perf_counter(), 0
    from tqdm import tqdm

    for c, lo in enumerate(tqdm(chunks, desc="dense embeddings", unit="chunk")):
        file = out / f"chunk-{c:04d}.npy"
        if file.is_file():
            continue
        emb = retriever.embed_documents(docs[lo : lo + DENSE_CHUNK]).astype(np.float32)
        tmp = file.with_suffix(".tmp.npy")
        np.save(tmp, emb, allow_pickle=False)
        tmp.replace(file)
        encoded += len(emb)
    return {"documents_encoded": encoded, "seconds": time.perf_counter() - start}


def load_dense(out: Path, n: int) -> np.ndarray:
    """The dense embeddings :func:`build_dense` wrote, checked against the number of documents."""
    import numpy as np

    files = sorted(out.glob("chunk-*.npy"))
    emb = np.concatenate([np.load(f, allow_pickle=False) for f in files])
    if len(emb) != n:
        raise SystemExit(f"{out}: {len(emb)} embeddings for {n} documents; delete it and rebuild")
    return emb


def build_phrases(model, model_name: str, passages: list[dict], out: Path) -> dict:
    """The phrase index of all passages with the model's filter threshold (resumes from its last committed chunk)."""
    from dphr_haystack.encode.add import add_passages
    from dphr_haystack.index.phrase_index import MANIFEST, PhraseIndex

    start = time.perf_counter()
    if (out / MANIFEST).is_file():
        index = PhraseIndex.load(out, model=model)
    else:
        index = PhraseIndex.create(
            model, path=out, model_path=model_name, filter_threshold=model.config.filter_threshold
        )
    before = index.num_passages
    add_passages(index, model, passages, batch_size=32, chunk_size=512, duplicates="skip", progress=True)
    return {
        "passages_encoded": index.num_passages - before,
        "seconds": time.perf_counter() - start,
        "passages": index.num_passages,
        "vectors": len(index),
    }


def build_squad_open_small(
    model_name: str, cache: Path, max_passages: int | None = None, only: str | None = None
) -> tuple[list, dict]:
    """Dense embeddings and the model's phrase index (``only``: one of them, e.g. in two processes at once)."""
    from dphr_haystack.nodes import corpus_documents, load_phrase_model

    docs = corpus_documents([SQUAD_DEV] if max_passages else [SQUAD_TRAIN, SQUAD_DEV])[:max_passages]
    updates: dict = {"documents": len(docs)}
    if only in (None, "dense"):
        dense = build_dense(docs, cache / "dense")
        if dense["documents_encoded"]:
            updates["dense"] = dense
    if only in (None, "phrases"):
        model = load_phrase_model(model_name)
        passages = [
            {"id": d.id, "text": d.content, "title": d.meta["title"], "document_id": d.meta["document_id"]}
            for d in docs
        ]
        phrase_dir = phrase_cache(model, cache)
        phrases = build_phrases(model, model_name, passages, phrase_dir)
        updates.update(model=model_name, phrase_index=phrase_dir.name)
        if phrases["passages_encoded"]:
            updates["phrase_indexes"] = {phrase_dir.name: phrases}
    return docs, _merge_build_stats(cache / "build.json", updates)


def _merge_build_stats(path: Path, updates: dict) -> dict:
    """Add ``updates`` to the build record as it is on disk now (another build process may have written it)."""
    stats = json.loads(path.read_text()) if path.is_file() else {}
    indexes = {**stats.get("phrase_indexes", {}), **updates.pop("phrase_indexes", {})}
    stats.update(updates, phrase_indexes=indexes)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(stats, indent=2))
    tmp.replace(path)
    return stats


def phrase_store(docs, phrase_dir: Path, embedding_dim: int = 384):
    """The 1.x PhraseDocumentStore every SQuAD-open-small pipeline queries: ``docs`` (BM25 built on write, their
    dense embeddings if set) and the phrase index in ``phrase_dir``."""
    from dphr_haystack.index.phrase_index import PhraseIndex
    from dphr_haystack.nodes import PhraseDocumentStore

    store = PhraseDocumentStore(embedding_dim=embedding_dim, similarity="cosine", progress_bar=False)
    store.write_documents(docs)
    store.attach_phrase_index(PhraseIndex.load(phrase_dir))
    return store


# BM25 of the store: the 1.x PhraseDocumentStore's (its inner InMemoryDocumentStore's defaults), or Haystack 2's.
HAYSTACK2_BM25 = {
    "haystack1": {"bm25_algorithm": "BM25Okapi", "bm25_tokenization_regex": r"(?u)\b\w\w+\b"},
    "haystack2": {},
}


def haystack2_phrase_store(docs: list, phrase_dir: Path, model, bm25: str = "haystack1"):
    """One Haystack 2 PhraseDocumentStore, named as the shipped pipelines name theirs, holding ``docs`` and serving
    the phrase index in ``phrase_dir`` (loaded, checked against ``model``, never encoded again): the 2.x twin of
    :func:`phrase_store`, BM25 as ``bm25`` of :data:`HAYSTACK2_BM25` says."""
    from dphr_haystack.haystack2 import PhraseDocumentStore
    from dphr_haystack.haystack2.pipelines import STORE_INDEX
    from dphr_haystack.index.phrase_index import PhraseIndex

    store = PhraseDocumentStore(index=STORE_INDEX, progress_bar=False, return_embedding=False, **HAYSTACK2_BM25[bm25])
    store.write_documents(docs)
    store.attach_phrase_index(PhraseIndex.load(phrase_dir, model=model))
    pending = store.pending_documents()
    if pending:
        store.close()
        raise SystemExit(
            f"{phrase_dir} lacks the phrases of {len(pending)} of the {len(docs)} documents (e.g. "
            f"{[d.id for d in pending[:3]]}): its build is incomplete or of another corpus; resume it (see --help)"
        )
    return store


# ----------------------------------------------------------------------------- logistic confidences
def fit_predict(x_fit: np.ndarray, y_fit: np.ndarray, x_test: np.ndarray) -> np.ndarray:
    """Confidences of ``x_test`` by the logistic calibration fitted on ``x_fit``
    (:func:`dphr_haystack.fitting.fit_calibration`'s fit; a NaN feature counts at its mean)."""
    import numpy as np

    from dphr_haystack.confidence import fit_logistic
    from dphr_haystack.model.calibration import sigmoid, standardised

    weights, bias, mean, scale = fit_logistic(x_fit, y_fit)
    return sigmoid(standardised(x_test, mean, scale) @ np.asarray(weights) + bias)


def out_of_fold_confidences(x: np.ndarray, y: np.ndarray, folds: int = 5, seed: int = 0) -> np.ndarray:
    """Each example's confidence from the logistic calibration fitted on the other folds (``folds``-fold
    cross-validation, examples assigned to folds at random with ``seed``)."""
    import numpy as np

    fold = np.random.default_rng(seed).permutation(len(y)) % folds
    out = np.empty(len(y))
    for f in range(folds):
        out[fold == f] = fit_predict(x[fold != f], y[fold != f], x[fold == f])
    return out


def analyze_sqlite(faiss_store) -> None:
    """Give a Haystack 1.x ``FAISSDocumentStore``'s SQLite table statistics (``ANALYZE``), after writing to it.

    The store fetches its hits from SQLite by vector id; without statistics the planner picks, depending on the
    process' hash seed, a plan that in about half of the processes scans the whole table (~50 ms a query at 20k
    documents instead of ~3). With them it takes the indexed plan every time: the fast configuration, as a careful
    deployment would run it.
    """
    from sqlalchemy import text

    faiss_store.session.execute(text("ANALYZE"))
    faiss_store.session.commit()


def cached_open_small_phrases(model, cache: Path | None = None) -> Path:
    """The directory of ``model``'s SQuAD-open-small phrase index: in ``cache``, or else the quality benchmarks'
    cache or the Haystack benchmark's (``runs/bench-cache``), whichever holds one."""
    for root in [cache] if cache else (SQUAD_OPEN_SMALL_CACHE, ROOT / "runs" / "bench-cache" / "squad-open-small"):
        path = phrase_cache(model, root)
        if path.is_dir():
            return path
    raise SystemExit(
        "no SQuAD-open-small phrase index of this model: build one with `python -m "
        "benchmarks.quality.squad_open_small` or `python -m benchmarks.haystack.retrievers --corpus open-small`"
    )


def squad_open_small_store(model_name: str):
    """The SQuAD-open-small store of ``quality.squad_open_small`` with ``model_name``'s cached phrase index."""
    from dphr_haystack.index.phrase_index import MANIFEST
    from dphr_haystack.nodes import corpus_documents, load_phrase_model

    phrase_dir = phrase_cache(load_phrase_model(model_name), SQUAD_OPEN_SMALL_CACHE)
    if not (phrase_dir / MANIFEST).is_file():
        raise SystemExit(
            f"{phrase_dir} not built: run python -m benchmarks.quality.squad_open_small --model {model_name}"
        )
    return phrase_store(corpus_documents([SQUAD_TRAIN, SQUAD_DEV]), phrase_dir), phrase_dir.name


def split_arguments(description: str) -> argparse.ArgumentParser:
    """The options of a benchmark that chooses on validation questions and reports on SQuAD-open-small ones."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--validation-questions", type=int, default=1000)
    parser.add_argument("--questions", type=int, default=300, help="SQuAD-open-small questions (default 300)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top-k", type=int, default=20)
    return parser


def question_splits(args: argparse.Namespace) -> dict[str, list]:
    """``validation`` (held-out articles: they choose) and ``bench`` (SQuAD-open-small: only reported) questions."""
    if not SQUAD_TRAIN.is_file() or not SQUAD_DEV.is_file():
        raise SystemExit("SQuAD train-rebuilt and dev-public are needed (../shared/data/squad)")
    return {
        "validation": held_out_questions(args.validation_questions, args.seed),
        "bench": squad_open_small_questions(args.questions, args.seed),
    }


# ----------------------------------------------------------------------------- figures
def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (benchmarks write PNG files only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def log_x_ticks(ax, ticks, label: str) -> None:
    """A log x axis of ``ax`` marked at the whole numbers ``ticks`` only, labelled ``label``."""
    ticks = sorted(set(ticks))
    ax.set_xscale("log")
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel(label)


def save_figure(fig, path: Path, dpi: int = 110) -> None:
    """Lay ``fig`` out tight, write it to ``path`` and free it."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
