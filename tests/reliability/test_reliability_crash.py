"""Crash safety: `dphr index`, PhraseDocumentStore.update_embeddings and save() killed with SIGKILL part-way.

After a kill the directory loads and is consistent; restarting the same command finishes the job, and the result
equals a clean, uninterrupted build: same passages in the same order (none missing, none twice), same vectors,
same search results. A save() killed at any step leaves the previous saved state, exactly.

Kill points: every durability step (fsync, rename, directory exchange, rmtree) of a run is a possible crash
point; the default run tries an evenly spread sample of them plus kills at random moments, the ``slow`` run all.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from dphr_haystack import PhraseIndex, PhraseSearcher
from tests.reliability._checks import assert_index_consistent, assert_store_consistent
from tests.reliability._crash import REPO, Zygote

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the crash tests fork child processes")


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    handle = Zygote(tmp_path_factory.mktemp("crash-logs"))
    yield handle
    handle.close()


def _kill_points(steps: int, profile: str, sample: int, tail: int = 3) -> list[int]:
    """All steps 1..steps (full), or (ci) the first three (creating the directory), the last ``tail`` (a final
    save's directory swap and clean-up) and ``sample`` more spread evenly in between."""
    if profile == "full" or steps <= sample + 3 + tail:
        points = list(range(1, steps + 1))
    else:
        last = steps - tail + 1
        middle = {round(4 + (i + 1) * (last - 5) / (sample + 1)) for i in range(sample)}
        points = sorted({1, 2, 3} | set(range(last, steps + 1)) | middle)
    print(f"kill points: {len(points)} of {steps} durability steps")  # shown by pytest -rA
    return points


def _assert_killed(result: dict) -> None:
    assert result["signal"] == signal.SIGKILL, f"expected a SIGKILL, got {result}\n{result['log'][-2000:]}"


def _assert_ok(result: dict) -> None:
    assert result["code"] == 0, f"job failed: {result}\n{result['log'][-3000:]}"


def _same_index(got: PhraseIndex, want: PhraseIndex, model, questions: list[str]) -> None:
    """Same passages in the same order, same tokens and vectors, same search results."""
    assert [p["id"] for p in got.passages] == [p["id"] for p in want.passages]
    assert got.live_passage_ids() == want.live_passage_ids()
    assert np.array_equal(got.tokens, want.tokens)
    assert np.array_equal(got.vectors(), want.vectors())
    for unit in ("phrase", "passage", "document"):
        assert PhraseSearcher(got, model).search_batch(questions, unit=unit, top_k=5) == PhraseSearcher(
            want, model
        ).search_batch(questions, unit=unit, top_k=5)


# ----------------------------------------------------------------- dphr index
@pytest.fixture(scope="module")
def clean_index(zygote, model_dir, corpus_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("clean") / "index"
    result = zygote.run("index", model=str(model_dir), corpus=str(corpus_file), out=str(out))
    _assert_ok(result)
    return out, result["steps"]


@pytest.mark.parametrize(
    "profile", [pytest.param("ci", marks=pytest.mark.unit), pytest.param("full", marks=pytest.mark.slow)]
)
def test_dphr_index_killed_at_commit_steps_resumes_to_the_clean_index(
    profile, zygote, clean_index, model_dir, corpus_file, tiny_model, squad_questions, tmp_path
):
    reference_dir, steps = clean_index
    reference = PhraseIndex.load(reference_dir, model=tiny_model)
    assert steps > 20  # create + 10 commits of 4 passages, several steps each
    for step in _kill_points(steps, profile, sample=2):
        out = tmp_path / f"killed-at-{step}"
        _assert_killed(zygote.run("index", kill_at=step, model=str(model_dir), corpus=str(corpus_file), out=str(out)))
        if (out / "manifest.json").is_file():  # what survived is a consistent prefix of the clean index
            partial = PhraseIndex.load(out, model=tiny_model)
            assert_index_consistent(partial)
            n = partial.num_passages
            assert partial.passages == reference.passages[:n]
            assert np.array_equal(partial.vectors(), reference.vectors(slice(0, len(partial))))
        _assert_ok(zygote.run("index", model=str(model_dir), corpus=str(corpus_file), out=str(out)))
        _same_index(PhraseIndex.load(out, model=tiny_model), reference, tiny_model, squad_questions[:8])


@pytest.mark.unit
def test_a_keyed_dphr_index_killed_at_commit_steps_resumes_to_the_clean_index(
    zygote, model_dir, corpus_file, tiny_model, squad_questions, tmp_path
):
    """An index of key vectors (``--key-vectors``): its key columns commit with the passages and resume the same."""
    keyed = ["--key-vectors", "3"]
    reference_dir = tmp_path / "clean"
    clean = zygote.run("index", model=str(model_dir), corpus=str(corpus_file), out=str(reference_dir), extra=keyed)
    _assert_ok(clean)
    reference = PhraseIndex.load(reference_dir, model=tiny_model)
    assert reference.key_vectors == 3 and reference.num_searched_vectors < len(reference)
    for step in _kill_points(clean["steps"], "ci", sample=3):
        out = tmp_path / f"killed-at-{step}"
        _assert_killed(
            zygote.run("index", kill_at=step, model=str(model_dir), corpus=str(corpus_file), out=str(out), extra=keyed)
        )
        if (out / "manifest.json").is_file():
            partial = PhraseIndex.load(out, model=tiny_model)
            assert_index_consistent(partial)
            keys = partial.num_searched_vectors
            assert np.array_equal(partial.storage.keys.view(), reference.storage.keys.view()[:keys])
        _assert_ok(zygote.run("index", model=str(model_dir), corpus=str(corpus_file), out=str(out), extra=keyed))
        resumed = PhraseIndex.load(out, model=tiny_model)
        _same_index(resumed, reference, tiny_model, squad_questions[:8])
        assert np.array_equal(resumed.storage.keys.view(), reference.storage.keys.view())
        assert np.array_equal(resumed.storage.key_rows.view(), reference.storage.key_rows.view())


def test_dphr_index_killed_at_random_moments_resumes(
    zygote, clean_index, model_dir, corpus_file, tiny_model, squad_questions, tmp_path
):
    reference = PhraseIndex.load(clean_index[0], model=tiny_model)
    rnd = random.Random(7)
    out = tmp_path / "index"
    for _ in range(3):  # three kills in a row into the same directory, then one run to the end
        result = zygote.run(
            "index", kill_after=rnd.uniform(0.3, 1.5), model=str(model_dir), corpus=str(corpus_file), out=str(out)
        )
        assert result["signal"] == signal.SIGKILL or result["code"] == 0, result["log"][-2000:]
    _assert_ok(zygote.run("index", model=str(model_dir), corpus=str(corpus_file), out=str(out)))
    _same_index(PhraseIndex.load(out, model=tiny_model), reference, tiny_model, squad_questions[:8])


def test_dphr_cli_process_sigkilled_mid_index_resumes(
    clean_index, model_dir, corpus_file, tiny_model, squad_questions, tmp_path
):
    """The real `python -m dphr_haystack index` process, SIGKILLed once its first commits are on disk."""
    out = tmp_path / "index"
    command = [
        sys.executable,
        "-m",
        "dphr_haystack",
        "index",
        "--model",
        str(model_dir),
        "--corpus",
        str(corpus_file),
        "--out",
        str(out),
        "--chunk-size",
        "2",
        "--device",
        "cpu",
        "--no-progress",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    committed = 0
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:
        try:
            committed = json.loads((out / "manifest.json").read_text())["counts"]["passages"]
        except (OSError, ValueError, KeyError):
            committed = 0
        if committed >= 4:
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    process.wait(timeout=60)
    if process.returncode != -signal.SIGKILL:
        pytest.skip(f"the indexing process ended before it could be killed (exit {process.returncode})")
    partial = PhraseIndex.load(out, model=tiny_model)
    assert_index_consistent(partial)
    assert 4 <= partial.num_passages < 40
    finished = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "resuming" in finished.stdout
    reference = PhraseIndex.load(clean_index[0], model=tiny_model)
    got = PhraseIndex.load(out, model=tiny_model)
    assert [p["id"] for p in got.passages] == [p["id"] for p in reference.passages]
    # --chunk-size 2 batches passages differently from the reference (4): vectors agree to float16 rounding.
    np.testing.assert_allclose(got.vectors(), reference.vectors(), atol=2e-3)
    for unit in ("passage", "document"):
        ours = PhraseSearcher(got, tiny_model).search_batch(squad_questions[:8], unit=unit, top_k=3)
        theirs = PhraseSearcher(reference, tiny_model).search_batch(squad_questions[:8], unit=unit, top_k=3)
        assert [[h.passage_id if unit == "passage" else h.document_id for h in hits] for hits in ours] == [
            [h.passage_id if unit == "passage" else h.document_id for h in hits] for hits in theirs
        ]


# ----------------------------------------------------------------- PhraseDocumentStore
@pytest.fixture(scope="module")
def store_dirs(tmp_path_factory, model_dir, squad_passages):
    """``partial``: 40 documents, phrases for the first 12. ``complete``: the first 36, with all phrases."""
    pytest.importorskip("haystack")
    from haystack.schema import Document

    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    root = tmp_path_factory.mktemp("stores")
    store = PhraseDocumentStore(progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=str(model_dir), top_k=5, device="cpu", batch_size=8)
    docs = [Document(content=p["text"], id=p["id"], meta={"title": p["title"]}) for p in squad_passages]
    store.write_documents(docs[:12])
    store.update_embeddings(retriever, batch_size=4)
    store.write_documents(docs[12:])
    store.save(root / "partial")
    store.delete_documents(ids=[d.id for d in docs[36:]])
    store.update_embeddings(retriever, batch_size=4)
    store.save(root / "complete")
    return {"partial": root / "partial", "complete": root / "complete"}


def _store_state(path, model_dir, questions):
    """Documents, live phrase ids with their vectors, and retrieval results of a saved store."""
    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    store = PhraseDocumentStore.load(path)
    assert_store_consistent(store)
    phrase_index = store.get_phrase_index()
    vectors = {}
    for pid in phrase_index.live_passage_ids():
        row = phrase_index.passage_row(pid)
        first, n = phrase_index.first_token[row], phrase_index.num_tokens[row]
        vectors[pid] = phrase_index.vectors(slice(first, first + n))
    retriever = PhraseRetriever(document_store=store, model=str(model_dir), top_k=5, device="cpu")
    results = [[(d.id, d.score, d.meta["best_phrase"]) for d in docs] for docs in retriever.retrieve_batch(questions)]
    return sorted(d.id for d in store.get_all_documents()), vectors, results


def _same_store(got, want) -> None:
    assert got[0] == want[0]
    assert sorted(got[1]) == sorted(want[1])
    for pid, vectors in want[1].items():
        assert np.array_equal(got[1][pid], vectors), pid
    assert got[2] == want[2]


@pytest.mark.parametrize(
    "profile", [pytest.param("ci", marks=pytest.mark.unit), pytest.param("full", marks=pytest.mark.slow)]
)
def test_update_embeddings_killed_at_commit_steps_resumes_to_the_clean_store(
    profile, zygote, store_dirs, model_dir, squad_questions, tmp_path
):
    questions = squad_questions[:6]
    reference = tmp_path / "reference"
    shutil.copytree(store_dirs["partial"], reference)
    result = zygote.run("store_update", path=str(reference), model=str(model_dir))
    _assert_ok(result)
    want = _store_state(reference, model_dir, questions)
    assert len(want[1]) == 40
    for step in _kill_points(result["steps"], profile, sample=2):
        path = tmp_path / f"killed-at-{step}"
        shutil.copytree(store_dirs["partial"], path)
        _assert_killed(zygote.run("store_update", kill_at=step, path=str(path), model=str(model_dir)))
        _store_state(path, model_dir, questions)  # loads, consistent, searchable
        _assert_ok(zygote.run("store_update", path=str(path), model=str(model_dir)))
        _same_store(_store_state(path, model_dir, questions), want)
    for delay in (0.7,):  # and at a random moment
        path = tmp_path / f"killed-after-{delay}"
        shutil.copytree(store_dirs["partial"], path)
        zygote.run("store_update", kill_after=delay, path=str(path), model=str(model_dir))
        _assert_ok(zygote.run("store_update", path=str(path), model=str(model_dir)))
        _same_store(_store_state(path, model_dir, questions), want)


@pytest.mark.parametrize(
    "profile", [pytest.param("ci", marks=pytest.mark.unit), pytest.param("full", marks=pytest.mark.slow)]
)
def test_killed_edit_and_save_leaves_the_previous_saved_state(
    profile, zygote, store_dirs, model_dir, corpus_file, squad_questions, tmp_path
):
    """Delete documents, add others, save: killed at any step, the directory holds the old state or the new one."""
    questions = squad_questions[:6]
    old = _store_state(store_dirs["complete"], model_dir, questions)
    reference = tmp_path / "reference"
    shutil.copytree(store_dirs["complete"], reference)
    edit = dict(model=str(model_dir), corpus=str(corpus_file), delete=[old[0][0], old[0][5]], add_from=36)
    result = zygote.run("store_edit", path=str(reference), **edit)
    _assert_ok(result)
    new = _store_state(reference, model_dir, questions)
    assert new[0] != old[0]
    outcomes = {"old": 0, "new": 0}
    for step in _kill_points(result["steps"], profile, sample=2, tail=6):
        path = tmp_path / f"killed-at-{step}"
        shutil.copytree(store_dirs["complete"], path)
        _assert_killed(zygote.run("store_edit", kill_at=step, path=str(path), **edit))
        state = _store_state(path, model_dir, questions)
        if state[0] == old[0]:
            _same_store(state, old)
            outcomes["old"] += 1
        else:
            _same_store(state, new)
            outcomes["new"] += 1
    assert outcomes["old"] >= 1


@pytest.mark.parametrize(
    "profile", [pytest.param("ci", marks=pytest.mark.unit), pytest.param("full", marks=pytest.mark.slow)]
)
def test_killed_index_save_leaves_the_previous_index(
    profile, zygote, clean_index, model_dir, corpus_file, tiny_model, squad_questions, tmp_path, squad_passages
):
    """PhraseIndex.save over an existing index directory, killed at every step: the old index or the new one."""
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps(p) + "\n" for p in squad_passages[:5]))
    old = PhraseIndex.load(clean_index[0], model=tiny_model)
    probe = tmp_path / "probe"
    shutil.copytree(clean_index[0], probe)
    result = zygote.run("index_save", model=str(model_dir), corpus=str(small), out=str(probe))
    _assert_ok(result)
    new = PhraseIndex.load(probe, model=tiny_model)
    assert new.num_passages == 5
    for step in _kill_points(result["steps"], profile, sample=3):
        path = tmp_path / f"killed-at-{step}"
        shutil.copytree(clean_index[0], path)
        _assert_killed(zygote.run("index_save", kill_at=step, model=str(model_dir), corpus=str(small), out=str(path)))
        got = PhraseIndex.load(path, model=tiny_model)
        _same_index(got, old if got.num_passages == old.num_passages else new, tiny_model, squad_questions[:4])
