"""Intra-op threads: where a count comes from, blocks that set and restore it, and the searcher, loader and CLI
that use it; and the loader that takes its weights without a random initialisation first."""

from __future__ import annotations

import threading

import pytest
import torch

from dphr_haystack import InvalidParameterError, PhraseIndex, PhraseModel, PhraseSearcher
from dphr_haystack._util import threads as th
from dphr_haystack.encode.add import add_passages
from tests.conftest import tiny_passages

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _clean_threads(monkeypatch):
    """Each test starts without DPHR_THREADS or a command-line count, and leaves torch's count as it found it."""
    monkeypatch.delenv(th.THREADS_ENV, raising=False)
    before = torch.get_num_threads()
    th.reset_threads()
    yield
    th.reset_threads()
    torch.set_num_threads(before)


def test_query_work_defaults_to_one_thread_and_bulk_work_to_torchs_own():
    assert th.resolve_threads(None, "query") == th.QUERY_THREADS == 1
    assert th.resolve_threads(None, "bulk") is None  # leave torch's default (one thread per core)


def test_a_count_comes_from_the_argument_then_the_block_then_the_process_then_the_environment(monkeypatch):
    monkeypatch.setenv(th.THREADS_ENV, "3")
    assert th.resolve_threads(None, "query") == 3
    assert th.resolve_threads(None, "bulk") == 3
    th.set_threads(2)
    assert th.resolve_threads(None, "bulk") == 2  # the command line's --threads beats the environment
    with th.using_threads(4):
        assert th.resolve_threads(None, "query") == 4  # an enclosing block beats both
        assert th.resolve_threads(5, "query") == 5  # and an explicit count beats everything
    assert th.resolve_threads(None, "query") == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, 10_000])
def test_bad_counts_are_refused(bad):
    with pytest.raises(InvalidParameterError, match="threads"):
        th.resolve_threads(bad, "query")
    with pytest.raises(InvalidParameterError, match="threads"):
        th.using_threads(bad).__enter__()


@pytest.mark.parametrize("bad", ["abc", "0", "-2", "1.5"])
def test_a_bad_environment_value_is_refused_by_name(monkeypatch, bad):
    monkeypatch.setenv(th.THREADS_ENV, bad)
    with pytest.raises(InvalidParameterError, match=th.THREADS_ENV):
        th.resolve_threads(None, "query")


def test_unknown_work_is_refused():
    with pytest.raises(InvalidParameterError, match="work"):
        th.resolve_threads(None, "indexing")


def test_a_block_sets_the_count_and_puts_the_previous_one_back_even_on_an_error():
    torch.set_num_threads(2)
    with th.using_threads(1):
        assert torch.get_num_threads() == 1
        with th.using_threads(3):
            assert torch.get_num_threads() == 3
        assert torch.get_num_threads() == 1  # the enclosing block's count again
    assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError), th.using_threads(1):
        raise RuntimeError("boom")
    assert torch.get_num_threads() == 2
    with th.using_threads(None):  # None: as they are
        assert torch.get_num_threads() == 2


def test_blocks_running_at_once_in_two_threads_each_change_their_own_thread_only():
    torch.set_num_threads(2)
    entered, release = threading.Event(), threading.Event()
    seen = {}

    def worker():
        torch.get_num_threads()  # this thread has run torch work: it keeps a count of its own
        with th.using_threads(1):
            seen["worker in its block"] = (torch.get_num_threads(), th.resolve_threads(None, "bulk"))
            entered.set()
            release.wait(10)
        seen["worker after"] = torch.get_num_threads()

    thread = threading.Thread(target=worker)
    thread.start()
    entered.wait(10)
    seen["main meanwhile"] = (torch.get_num_threads(), th.resolve_threads(None, "bulk"))
    with th.using_threads(3):
        seen["main in its block"] = torch.get_num_threads()
    release.set()
    thread.join(10)
    assert seen == {
        "worker in its block": (1, 1),
        "main meanwhile": (2, None),
        "main in its block": 3,
        "worker after": 2,
    }
    assert torch.get_num_threads() == 2


def test_faiss_gets_the_same_count_once_loaded():
    faiss = pytest.importorskip("faiss")
    before = faiss.omp_get_max_threads()
    with th.using_threads(1):
        assert faiss.omp_get_max_threads() == 1
    assert faiss.omp_get_max_threads() == before


@pytest.fixture
def index(tiny_model):
    idx = PhraseIndex.create(tiny_model)
    add_passages(idx, tiny_model, tiny_passages(), progress=False)
    return idx


def _recording_threads(model, monkeypatch) -> list[int]:
    seen: list[int] = []
    encode = model.encode_queries

    def recorded(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return encode(*args, **kwargs)

    monkeypatch.setattr(model, "encode_queries", recorded)
    return seen


def test_the_searcher_encodes_queries_on_one_thread_by_default(index, tiny_model, monkeypatch):
    torch.set_num_threads(2)
    seen = _recording_threads(tiny_model, monkeypatch)
    default = PhraseSearcher(index, tiny_model).search_batch(["who wrote hamlet"], unit="phrase")
    PhraseSearcher(index, tiny_model, threads=2).search_batch(["who wrote hamlet"], unit="phrase")
    monkeypatch.setenv(th.THREADS_ENV, "2")
    PhraseSearcher(index, tiny_model).search_batch(["who wrote hamlet"], unit="phrase")
    assert seen == [1, 2, 2]
    assert torch.get_num_threads() == 2  # put back after each search
    torch.set_num_threads(1)
    assert PhraseSearcher(index, tiny_model, threads=2).search_batch(["who wrote hamlet"], unit="phrase") == default


def test_the_command_line_sets_the_count_for_the_whole_process(tiny_model, tmp_path, monkeypatch):
    from dphr_haystack.cli import main

    idx = PhraseIndex.create(tiny_model, path=tmp_path / "idx", model_path=str(tmp_path / "model"))
    add_passages(idx, tiny_model, tiny_passages(), progress=False)
    tiny_model.save(tmp_path / "model")
    torch.set_num_threads(2)
    assert main(["search", "--index", str(tmp_path / "idx"), "--threads", "3", "who wrote hamlet"]) == 0
    assert torch.get_num_threads() == 3 and th.resolve_threads(None, "query") == 3
    th.reset_threads()
    assert main(["search", "--index", str(tmp_path / "idx"), "who wrote hamlet"]) == 0
    assert torch.get_num_threads() == 1  # a query command: one thread unless told otherwise


def test_the_command_line_refuses_a_bad_count(capsys):
    from dphr_haystack.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["search", "--index", "nowhere", "--threads", "0", "q"])
    assert exit_info.value.code == 2
    assert "threads=0 is out of range" in capsys.readouterr().err


# ----------------------------------------------------------------------------- loading without random init
@pytest.mark.parametrize("omit_base_weights", [False, True])
def test_a_loaded_model_holds_exactly_the_saved_weights_each_in_its_own_memory(
    tiny_model, tmp_path, omit_base_weights
):
    # omit_base_weights: the untrained encoders' tensors all come from the base model, one tensor for several keys
    tiny_model.save(tmp_path / "m", max_shard_mb=1 if omit_base_weights else None, omit_base_weights=omit_base_weights)
    loaded = PhraseModel.load(tmp_path / "m")
    expected = tiny_model.state_dict()
    assert list(loaded.state_dict()) == list(expected)
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
    assert not any(t.is_meta for t in (*loaded.parameters(), *loaded.buffers()))
    storages = [p.untyped_storage().data_ptr() for p in loaded.parameters()]
    assert len(set(storages)) == len(storages)  # no two weights share memory (training may change one)
    assert not loaded.training and all(p.requires_grad for p in loaded.parameters())
    queries = ["who wrote hamlet", "capital of france"]
    for a, b in zip(loaded.encode_queries(queries), tiny_model.encode_queries(queries), strict=True):
        assert (a == b).all()
    assert loaded.phrase_fingerprint() == tiny_model.phrase_fingerprint()


def test_loading_runs_on_one_thread_by_default(tiny_model_dir, monkeypatch):
    from dphr_haystack.model import loading

    seen = []
    load = loading.PhraseModel.from_source

    def recorded(source, **kwargs):
        seen.append(torch.get_num_threads())
        return load(source, **kwargs)

    monkeypatch.setattr(loading.PhraseModel, "from_source", recorded)
    torch.set_num_threads(2)
    loading.load_model(tiny_model_dir)
    assert seen == [1] and torch.get_num_threads() == 2
