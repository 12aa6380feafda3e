"""Safe loading: a malicious pickle put where a checkpoint, index, dump shard or saved store file belongs is refused
with a clear error and never runs (its payload would create a marker file). Extends the DensePhrases
``pytorch_model.bin`` case of tests/core/test_model.py to every file the library and the trainer read."""

from __future__ import annotations

import json
import pickle
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from dphr_haystack import IndexLoadError, ModelLoadError, PhraseIndex, PhraseModel, PhraseShard, dump_phrases
from dphr_haystack.encode.add import add_passages
from dphr_haystack.index.shards import list_shards

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


class _Exploit:
    """Unpickling this runs ``exec``: it writes the file named by $DPHR_PWNED."""

    def __reduce__(self):
        return (exec, ("import os, pathlib; pathlib.Path(os.environ['DPHR_PWNED']).write_text('ran')",))


@pytest.fixture
def marker(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "pwned"
    monkeypatch.setenv("DPHR_PWNED", str(path))
    yield path
    assert not path.exists(), "the malicious pickle ran"


def _plant(file: Path, how: str) -> None:
    """Replace ``file`` by a malicious pickle: raw pickle, a torch.save zip, or a .npy object array."""
    payload = {"weights": _Exploit()}
    if how == "pickle":
        file.write_bytes(pickle.dumps(payload, protocol=4))
    elif how == "torch":
        torch.save(payload, file)
    else:
        array = np.empty(1, dtype=object)
        array[0] = _Exploit()
        with file.open("wb") as handle:
            np.save(handle, array, allow_pickle=True)


# ----------------------------------------------------------------- models
@pytest.fixture(scope="module")
def saved_model(tmp_path_factory, _tiny_model_session) -> Path:
    path = tmp_path_factory.mktemp("model") / "model"
    _tiny_model_session.save(path)
    return path


@pytest.mark.parametrize(
    "name", ["model.safetensors", "dphr_config.json", "encoder_config.json", "tokenizer.json", "tokenizer_config.json"]
)
@pytest.mark.parametrize("how", ["pickle", "torch"])
def test_model_directory_file_replaced_by_a_pickle(saved_model, tmp_path, marker, name, how):
    model_dir = shutil.copytree(saved_model, tmp_path / "model")
    _plant(model_dir / name, how)
    with pytest.raises(ModelLoadError, match=re.escape(str(model_dir))):
        PhraseModel.load(model_dir)


@pytest.mark.parametrize("name", ["vocab.txt", "special_tokens_map.json"])
def test_unread_or_optional_model_files_never_unpickle(saved_model, tmp_path, marker, name):
    """Files the fast tokenizer does not need (tokenizer.json holds the vocabulary): loading ignores them or
    refuses them, and in neither case runs them."""
    model_dir = shutil.copytree(saved_model, tmp_path / "model")
    if not (model_dir / name).exists():
        pytest.skip(f"{name} is not written by this tokenizer")
    _plant(model_dir / name, "pickle")
    try:
        PhraseModel.load(model_dir).encode_queries(["still works"])
    except ModelLoadError:
        pass


def test_densephrases_torch_zip_pickle_is_refused(_tiny_model_session, tmp_path, marker):
    """A pytorch_model.bin in torch's zip format whose pickle holds code (the raw-pickle case is in tests/core)."""
    checkpoint = tmp_path / "dp"
    checkpoint.mkdir()
    _tiny_model_session.tokenizer.save_pretrained(str(checkpoint))
    (checkpoint / "config.json").write_text(_tiny_model_session.phrase_encoder.config.to_json_string())
    _plant(checkpoint / "pytorch_model.bin", "torch")
    with pytest.raises(ModelLoadError, match="refused"):
        PhraseModel.load(checkpoint)


def test_haystack_model_loader_refuses_pickles(saved_model, tmp_path, marker):
    pytest.importorskip("haystack")
    from dphr_haystack.nodes import load_phrase_model

    model_dir = shutil.copytree(saved_model, tmp_path / "model")
    _plant(model_dir / "model.safetensors", "pickle")
    with pytest.raises(ModelLoadError):
        load_phrase_model(str(model_dir), device="cpu")


def test_trainer_resume_state_pickle_is_refused(saved_model, tmp_path, marker, _tiny_model_session):
    """train/trainer.py reads trainer_state.pt with torch.load(weights_only=True): code in it never runs."""
    pytest.importorskip("train.trainer")
    from train.trainer import STATE_FILE, TrainArgs, Trainer

    checkpoint = tmp_path / "run" / "checkpoint-1"
    shutil.copytree(saved_model, checkpoint / "model")
    _plant(checkpoint / STATE_FILE, "torch")

    class _Task:  # never reached: resuming fails first
        def num_batches(self, batch_size, world_size):
            return 1

        def batches(self, epoch, batch_size, rank, world_size, seed):
            yield {}

        def step(self, model, batch):
            return {"loss": model.filter_linear.weight.sum() * 0}

    trainer = Trainer(
        _tiny_model_session,
        TrainArgs(output_dir=str(tmp_path / "run"), max_steps=1, progress=False, precision="fp32"),
        _Task(),
    )
    with pytest.raises(Exception, match="(?i)weights.only|unpickl|refused") as caught:
        trainer.train()
    assert not isinstance(caught.value, (AssertionError, NameError))


# ----------------------------------------------------------------- phrase indexes
@pytest.fixture(scope="module")
def saved_ivf_index(tmp_path_factory, _tiny_model_session, squad_passages) -> Path:
    path = tmp_path_factory.mktemp("index") / "index"
    index = PhraseIndex.create(_tiny_model_session, path=path, faiss_factory="IVF4,Flat")
    add_passages(index, _tiny_model_session, squad_passages[:10], progress=False)
    index.delete_passages([squad_passages[0]["id"]])
    return path


@pytest.mark.parametrize(
    "name", ["manifest.json", "vectors.bin", "tokens.bin", "passages.jsonl", "tombstones.bin", "faiss"]
)
@pytest.mark.parametrize("how", ["pickle", "torch"])
def test_index_file_replaced_by_a_pickle(saved_ivf_index, tmp_path, marker, name, how):
    index_dir = shutil.copytree(saved_ivf_index, tmp_path / "index")
    if name == "faiss":
        name = json.loads((index_dir / "manifest.json").read_text())["faiss_file"]
    _plant(index_dir / name, how)
    with pytest.raises(IndexLoadError, match=re.escape(name)):
        PhraseIndex.load(index_dir)


# ----------------------------------------------------------------- dump shards
@pytest.fixture(scope="module")
def saved_dump(tmp_path_factory, _tiny_model_session, squad_passages) -> Path:
    out = tmp_path_factory.mktemp("dump") / "dump"
    dump_phrases(_tiny_model_session, squad_passages[:8], out, shard_size=4, progress=False)
    return out


@pytest.mark.parametrize("name", ["vectors.npy", "tokens.npy", "passages.jsonl", "shard.json"])
@pytest.mark.parametrize("how", ["pickle", "npy"])
def test_dump_shard_file_replaced_by_a_pickle(saved_dump, tmp_path, marker, name, how, tiny_model, squad_passages):
    dump_dir = shutil.copytree(saved_dump, tmp_path / "dump")
    shard = list_shards(dump_dir)[0]
    _plant(shard / name, how)
    with pytest.raises(IndexLoadError, match="shard"):
        PhraseShard.load(shard)
    with pytest.raises(IndexLoadError):  # even without checksums, numpy is never allowed to unpickle
        PhraseShard.load(shard, verify=False)
    summary = dump_phrases(tiny_model, squad_passages[:8], dump_dir, shard_size=4, progress=False)
    assert summary.encoded_shards == 1  # resuming treats the planted shard as damaged and encodes it again
    PhraseShard.load(shard)


# ----------------------------------------------------------------- saved stores
@pytest.fixture(scope="module")
def saved_store(tmp_path_factory, model_dir, squad_passages) -> Path:
    pytest.importorskip("haystack")
    from haystack.schema import Document

    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    store = PhraseDocumentStore(progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=str(model_dir), device="cpu")
    store.index_documents([Document(content=p["text"], id=p["id"]) for p in squad_passages[:6]], retriever)
    path = tmp_path_factory.mktemp("store") / "store"
    store.save(path)
    return path


@pytest.mark.parametrize(
    "name",
    [
        "store.sqlite3",
        "phrases-0/manifest.json",
        "phrases-0/vectors.bin",
        "phrases-0/passages.jsonl",
    ],
)
def test_saved_store_file_replaced_by_a_pickle(saved_store, tmp_path, marker, name):
    from haystack.errors import DocumentStoreError

    from dphr_haystack.nodes import PhraseDocumentStore

    store_dir = shutil.copytree(saved_store, tmp_path / "store")
    _plant(store_dir / name, "pickle")
    with pytest.raises((DocumentStoreError, IndexLoadError), match=re.escape(Path(name).name)):
        PhraseDocumentStore.load(store_dir)


# ----------------------------------------------------------------- no unsafe loader anywhere
UNSAFE = [
    (re.compile(r"\bpickle\.loads?\("), "pickle.load"),
    (re.compile(r"\b(cPickle|dill|joblib|cloudpickle)\.load"), "pickle-based loader"),
    (re.compile(r"allow_pickle\s*=\s*True"), "numpy allow_pickle=True"),
    (re.compile(r"weights_only\s*=\s*False"), "torch.load(weights_only=False)"),
    (re.compile(r"\byaml\.load\((?![^)]*SafeLoader)"), "yaml.load without SafeLoader"),
    (re.compile(r"\byaml\.unsafe_load\b|yaml\.full_load\b"), "unsafe yaml loader"),
]


def test_no_unsafe_loader_in_the_sources():
    """torch.load only with weights_only=True, never numpy's allow_pickle=True (its default is False), no pickle,
    only yaml.safe_load."""
    problems = []
    for folder in ("dphr_haystack", "train", "benchmarks", "scripts"):
        for file in sorted((REPO / folder).rglob("*.py")):
            text = file.read_text(encoding="utf-8")
            for pattern, what in UNSAFE:
                problems += [f"{file.relative_to(REPO)}: {what}" for _ in pattern.finditer(text)]
            for call in re.finditer(r"\btorch\.load\(([^()]|\([^()]*\))*\)", text):
                if "weights_only=True" not in call.group(0):
                    problems.append(f"{file.relative_to(REPO)}: torch.load without weights_only=True")
    assert problems == []
