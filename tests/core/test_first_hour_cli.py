"""The first hour with the command line: where ``dphr serve`` keeps its store, and ``dphr search`` over an index
built from Python (the core snippet of docs/python.md) without ``--model``."""

from __future__ import annotations

import json
from pathlib import Path

from dphr_haystack.cli import _parser, main


def test_serve_default_store_is_in_the_user_data_directory(tmp_path, monkeypatch):
    from dphr_haystack.cli.serve import serve_store_path

    work, home, data = tmp_path / "work", tmp_path / "home", tmp_path / "xdg-data"
    work.mkdir()
    monkeypatch.chdir(work)
    args = _parser().parse_args(["serve"])
    with_xdg = serve_store_path(args.store, {"HOME": str(home), "XDG_DATA_HOME": str(data)})
    assert with_xdg == data / "dphr-haystack" / "store"
    without_xdg = serve_store_path(args.store, {"HOME": str(home)})
    assert without_xdg == home / ".local" / "share" / "dphr-haystack" / "store"
    relative_xdg = serve_store_path(args.store, {"HOME": str(home), "XDG_DATA_HOME": "relative"})
    assert relative_xdg == without_xdg  # the XDG spec: a relative XDG_DATA_HOME is ignored
    for path in (with_xdg, without_xdg):
        assert path.is_absolute() and not path.is_relative_to(work)
    assert not (work / "dphr-store").exists()


def test_serve_store_given_stays_explicit(tmp_path, monkeypatch):
    from dphr_haystack.cli.serve import serve_store_path

    monkeypatch.chdir(tmp_path)
    args = _parser().parse_args(["serve", "--store", "here"])
    assert serve_store_path(args.store, {"HOME": str(tmp_path / "home")}) == tmp_path / "here"


def test_dphr_store_is_ignored_by_git():
    ignored = (Path(__file__).resolve().parents[2] / ".gitignore").read_text().split()
    assert "dphr-store/" in ignored


def _build_like_the_readme(model_ref: str, folder: Path) -> None:
    """The "core without Haystack" steps of docs/python.md: load a model by reference, create an index on disk, add."""
    from dphr_haystack import PhraseIndex, PhraseModel, add_passages
    from tests.conftest import tiny_passages

    model = PhraseModel.load(model_ref)
    index = PhraseIndex.create(model, path=folder / "my-index")
    add_passages(index, model, tiny_passages(), progress=False)


def test_search_cli_finds_the_model_of_an_index_built_in_python(tiny_model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _build_like_the_readme(str(tiny_model_dir), tmp_path)
    status = main(["search", "--index", "my-index", "--json", "--top-k", "3", "Who wrote Hamlet?"])
    out = capsys.readouterr()
    assert status == 0, out.err
    rows = json.loads(out.out.splitlines()[0])["results"]
    assert len(rows) == 3


def test_index_of_a_shipped_model_records_its_name(tmp_path):
    from dphr_haystack import PhraseIndex, PhraseModel
    from dphr_haystack.model.registry import DEFAULT_MODEL

    model = PhraseModel.load("default")
    index = PhraseIndex.create(model, path=tmp_path / "my-index")
    assert index.manifest["model_path"] == DEFAULT_MODEL  # resolves in any installation, not this one's path


def test_search_cli_of_an_in_memory_model_says_how_to_pass_it(tiny_model, tmp_path, monkeypatch, capsys):
    from dphr_haystack import PhraseIndex, add_passages
    from tests.conftest import tiny_passages

    monkeypatch.chdir(tmp_path)
    index = PhraseIndex.create(tiny_model, path="my-index")  # built in memory: no directory to record
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    assert index.manifest["model_path"] is None
    assert main(["search", "--index", "my-index", "Who wrote Hamlet?"]) == 2
    err = capsys.readouterr().err
    assert "--model" in err and tiny_model.phrase_fingerprint()[:12] in err


def test_search_cli_explicit_model_still_wins(tiny_model, tiny_model_dir, tmp_path, monkeypatch, capsys):
    from dphr_haystack import PhraseIndex, add_passages
    from tests.conftest import tiny_passages

    monkeypatch.chdir(tmp_path)
    index = PhraseIndex.create(tiny_model, path="my-index")
    add_passages(index, tiny_model, tiny_passages(), progress=False)
    status = main(["search", "--index", "my-index", "--model", str(tiny_model_dir), "Who wrote Hamlet?"])
    assert status == 0, capsys.readouterr().err


def test_adding_a_list_of_passages_shows_a_bar_with_a_total(tiny_model, monkeypatch):
    """The core snippet of docs/python.md adds a list: its progress bar says how many passages there are to index."""
    import tqdm.auto

    from dphr_haystack import PhraseIndex, add_passages
    from tests.conftest import tiny_passages

    totals = []
    real = tqdm.auto.tqdm

    def recording(*args, **kwargs):
        totals.append(kwargs.get("total"))
        return real(*args, **kwargs)

    monkeypatch.setattr(tqdm.auto, "tqdm", recording)
    passages = tiny_passages()
    add_passages(PhraseIndex.create(tiny_model), tiny_model, passages, progress=False)
    assert totals[0] == len(passages)  # (the first bar; a codec calibration may show its own)
