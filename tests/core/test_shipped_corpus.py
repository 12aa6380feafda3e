"""The SQuAD dev corpus shipped inside the package: counts, ids, questions, the checksum, the name in the readers."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import tomllib
from pathlib import Path

import pytest

import dphr_haystack.datasets as datasets
from dphr_haystack import CorpusFormatError, PhraseIndex, read_corpus
from dphr_haystack.cli import main as dphr
from dphr_haystack.datasets import SQUAD_DEV, resolve_data_file, shipped_dataset, shipped_dataset_names
from dphr_haystack.encode.add import add_passages
from dphr_haystack.evaluation import read_questions
from tests.conftest import SQUAD_DEV as SHARED_SQUAD_DEV
from tests.conftest import tiny_passages

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def squad_dev_passages():
    return list(read_corpus("squad-dev"))


def test_the_shipped_file_is_the_documented_one():
    assert shipped_dataset_names() == ["squad-dev"] and shipped_dataset("squad-dev") is SQUAD_DEV
    data = SQUAD_DEV.path.read_bytes()
    assert len(data) == 864_704
    assert hashlib.sha256(data).hexdigest() == "a8d72be336ebc02b188ea5c2956408a5eacadf979e7983269ba247fb327eaa68"
    notes = (SQUAD_DEV.folder / "README.md").read_text() + (SQUAD_DEV.folder / "LICENSE").read_text()
    for fact in ("CC BY-SA 4.0", "Rajpurkar", "Lopyrev", "EMNLP 2016", "1,702 paragraphs", "8,763 questions"):
        assert fact in notes
    if SHARED_SQUAD_DEV.is_file():  # the same bytes as the copy the repository's tests and benchmarks read
        assert SHARED_SQUAD_DEV.read_bytes() == data


def test_every_shipped_file_is_package_data():
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = package_data["dphr_haystack.shipped_datasets"]  # relative to the shipped_datasets package
    package = ROOT / "dphr_haystack" / "shipped_datasets"
    shipped = [p.relative_to(package).as_posix() for p in package.rglob("*") if p.is_file()]
    assert {"squad-dev/dev-v1.1-public.json.gz", "squad-dev/LICENSE"} <= set(shipped)
    assert [f for f in shipped if not any(fnmatch.fnmatchcase(f, pat) for pat in patterns)] == []


def test_passages_follow_the_squad_id_scheme(squad_dev_passages):
    passages = squad_dev_passages
    assert len(passages) == SQUAD_DEV.passages == 1702
    assert len({p.document_id for p in passages}) == SQUAD_DEV.articles == 40
    first = passages[0]
    assert (first.id, first.title, first.document_id) == ("Super_Bowl_50-0-0", "Super_Bowl_50", "Super_Bowl_50")
    assert first.text.startswith("Super Bowl 50 was an American football game")
    assert passages[-1].id.startswith("Force-39-")


def test_questions_point_at_shipped_passages(squad_dev_passages):
    questions = read_questions("squad-dev")
    assert len(questions) == SQUAD_DEV.questions == 8763
    ids = {p.id for p in squad_dev_passages}
    assert all(q.gold_passage_id in ids and q.answers for q in questions)
    sample = read_questions("squad-dev", limit=200, seed=0)
    assert len(sample) == 200 and sample == read_questions("squad-dev", limit=200, seed=0)


def test_a_damaged_or_missing_copy_is_refused(tmp_path, monkeypatch):
    copy = tmp_path / "squad-dev"
    copy.mkdir()
    data = bytearray(SQUAD_DEV.path.read_bytes())
    data[-20] ^= 1
    (copy / SQUAD_DEV.file_name).write_bytes(bytes(data))
    monkeypatch.setattr(datasets, "SHIPPED_DATASETS_DIR", tmp_path)
    with pytest.raises(CorpusFormatError, match="damaged"):
        list(read_corpus("squad-dev"))
    with pytest.raises(CorpusFormatError, match="damaged"):
        read_questions("squad-dev")
    (copy / SQUAD_DEV.file_name).unlink()
    with pytest.raises(CorpusFormatError, match="missing"):
        list(read_corpus("squad-dev"))


def test_an_existing_path_of_that_name_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_data_file("squad-dev") == SQUAD_DEV.path
    Path("squad-dev").write_text(json.dumps({"id": "mine", "text": "my own corpus"}) + "\n")
    assert [p.id for p in read_corpus("squad-dev")] == ["mine"]
    assert resolve_data_file("elsewhere.jsonl") == Path("elsewhere.jsonl")
    with pytest.raises(CorpusFormatError, match="squad-dev"):  # the error names what is shipped
        list(read_corpus("elsewhere.jsonl"))
    with pytest.raises(FileNotFoundError, match="squad-dev"):
        read_questions("elsewhere.json")


def test_dphr_index_reads_the_shipped_corpus_by_name(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import dphr_haystack.encode.add as add

    def first_passages(index, model, corpus, **kwargs):  # encoding all 1,702 with the tiny model takes a minute
        seen = list(corpus)
        assert len(seen) == 1702 and seen[0].id == "Super_Bowl_50-0-0"
        return add_passages(index, model, seen[:3], **kwargs)

    monkeypatch.setattr(add, "add_passages", first_passages)
    argv = ["index", "--model", str(tiny_model_dir), "--corpus", "squad-dev", "--out", str(tmp_path / "i")]
    assert dphr([*argv, "--no-progress"]) == 0
    assert [p["id"] for p in PhraseIndex.load(tmp_path / "i").passages] == [
        "Super_Bowl_50-0-0",
        "Super_Bowl_50-0-1",
        "Super_Bowl_50-0-2",
    ]


def test_dphr_eval_reads_the_shipped_questions_by_name(tiny_model_dir, tmp_path, capsys):
    from dphr_haystack.model.loading import load_model

    model = load_model(tiny_model_dir)
    index = PhraseIndex.create(model, path=tmp_path / "i", model_path=str(tiny_model_dir))
    add_passages(index, model, tiny_passages(), progress=False)
    out = tmp_path / "eval"
    argv = ["eval", "--index", str(tmp_path / "i"), "--questions", "squad-dev", "--limit", "5", "--seed", "0"]
    assert dphr([*argv, "--top-k", "3", "--out", str(out), "--name", "sq", "--no-progress"]) == 0
    summary = json.loads((out / "sq.summary.json").read_text())
    assert summary["questions"] == 5
