"""Concurrency: N threads x M queries give exactly the serial results; writes during reads on a
PhraseDocumentStore are safe (a reader-writer lock), never a crash or a half-written state."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from dphr_haystack import PhraseIndex, PhraseSearcher
from dphr_haystack.encode.add import add_passages
from tests.reliability._checks import assert_store_consistent, check_documents

pytestmark = pytest.mark.unit

THREADS = 8


@pytest.fixture(autouse=True)
def _switch_threads_often():
    """Switch threads as often as the interpreter can, so that races show up instead of hiding."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def _run_threads(worker, n: int = THREADS) -> list[BaseException]:
    """Start ``n`` threads at once (barrier) running ``worker(thread_no)``; return what they raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(no: int) -> None:
        try:
            barrier.wait()
            worker(no)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(no,)) for no in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung (deadlock?)"
    return errors


@pytest.fixture(scope="module")
def index_and_model(_tiny_model_session, squad_passages):
    import torch

    torch.set_num_threads(1)
    index = PhraseIndex.create(_tiny_model_session)
    add_passages(index, _tiny_model_session, squad_passages, progress=False)
    return index, _tiny_model_session


def test_phrase_searcher_threads_give_the_serial_results(index_and_model, squad_questions):
    index, model = index_and_model
    searcher = PhraseSearcher(index, model)
    units = ("phrase", "passage", "document")
    jobs = [(q, units[i % 3], 3 + i % 5) for i, q in enumerate(squad_questions * 2)]  # M = 2 x questions
    serial = [searcher.search(q, unit, k) for q, unit, k in jobs]
    results: dict[tuple[int, int], list] = {}

    def worker(no: int) -> None:
        for i in range(len(jobs)):
            j = (i + no * 7) % len(jobs)  # every thread in another order
            q, unit, k = jobs[j]
            if i % 4 == 3:  # batched calls interleave with single ones
                results[(no, j)] = searcher.search_batch([q], unit, k)[0]
            else:
                results[(no, j)] = searcher.search(q, unit, k)

    assert _run_threads(worker) == []
    assert len(results) == THREADS * len(jobs)
    for (_, j), hits in results.items():
        assert hits == serial[j], f"thread result for {jobs[j]} differs from the serial one"


@pytest.fixture
def retriever(model_dir, squad_passages):
    pytest.importorskip("haystack")
    from haystack.schema import Document

    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    store = PhraseDocumentStore(progress_bar=False)
    retriever = PhraseRetriever(document_store=store, model=str(model_dir), top_k=4, device="cpu")
    store.index_documents(
        [
            Document(content=p["text"], id=p["id"], meta={"title": p["title"], "n": n % 3})
            for n, p in enumerate(squad_passages)
        ],
        retriever,
    )
    return retriever


def _answers(output):
    return [(a.answer, a.document_ids, a.offsets_in_document[0].start, a.score) for a in output["answers"]]


def test_phrase_retriever_threads_give_the_serial_results(retriever, squad_questions):
    filters = [None, {"n": 0}, {"n": [1, 2]}]
    jobs = [(q, filters[i % 3]) for i, q in enumerate(squad_questions)]

    def ask(q, f):
        docs = retriever.retrieve(q, filters=f)
        output, _ = retriever.run_query(q, filters=f)
        return [(d.id, d.score, d.meta["best_phrase"]) for d in docs], _answers(output)

    serial = [ask(q, f) for q, f in jobs]
    batch_serial = retriever.retrieve_batch([q for q, _ in jobs])
    results = {}

    def worker(no: int) -> None:
        for i in range(len(jobs)):
            j = (i + no * 5) % len(jobs)
            results[(no, j)] = ask(*jobs[j])
        if no % 2:
            got = retriever.retrieve_batch([q for q, _ in jobs])
            assert [[d.id for d in docs] for docs in got] == [[d.id for d in docs] for docs in batch_serial]

    assert _run_threads(worker) == []
    for (_, j), got in results.items():
        assert got == serial[j]


def test_bm25_queries_on_the_store_from_threads_give_the_serial_results(retriever, squad_questions):
    """Haystack's in-memory BM25 writes scores into the stored documents; the store serialises those queries."""
    store = retriever.document_store
    serial = [[(d.id, d.score) for d in store.query(q, top_k=5)] for q in squad_questions]
    results = {}

    def worker(no: int) -> None:
        for i in range(3 * len(squad_questions)):
            j = (i + no * 3) % len(squad_questions)
            got = [(d.id, d.score) for d in store.query(squad_questions[j], top_k=5)]
            if got != serial[j]:
                results[(no, j)] = got

    assert _run_threads(worker) == []
    for (_, j), got in results.items():
        assert got == serial[j]


def test_writes_during_reads_are_safe(retriever, squad_passages, squad_questions, tmp_path):
    """Readers retrieve while a writer adds, re-indexes, overwrites, deletes and saves: no error, every result
    is a stored document whose best phrase is a slice of its current text, and the final state is consistent
    and equals a store built from scratch with the same documents."""
    from haystack.schema import Document

    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    store = retriever.document_store
    base = squad_passages[:30]
    store.delete_documents(ids=[p["id"] for p in squad_passages[30:]])
    extra = [Document(content=p["text"], id=p["id"], meta={"title": p["title"], "n": 9}) for p in squad_passages[30:]]
    stop = threading.Event()
    reads: list[int] = []  # list.append is atomic; a shared counter would lose increments between threads

    def writer() -> None:
        for round_no in range(3):
            store.write_documents(extra)
            store.update_embeddings(retriever, batch_size=2)  # commits between reads
            changed = [
                Document(content=p["text"] + f" Revision {round_no}.", id=p["id"], meta={"title": p["title"]})
                for p in base[:4]
            ]
            store.write_documents(changed)  # overwrite: stale phrases must never meet the new text
            store.update_embeddings(retriever, batch_size=3)
            store.delete_documents(ids=[d.id for d in extra[: 2 + round_no]])
            store.save(tmp_path / "live-save")
        stop.set()

    def reader(no: int) -> None:
        i = 0
        while not stop.is_set() or i < 3:
            q = squad_questions[(i + no) % len(squad_questions)]
            if i % 3 == 0:
                docs = retriever.retrieve_batch([q, q + " please"])[0]
            else:
                docs = retriever.retrieve(q, filters={"n": [0, 1, 2, 9]} if i % 3 == 1 else None)
            check_documents(None, docs)  # the store may change right after: check each result in itself
            output, _ = retriever.run_query(q)
            for answer in output["answers"]:
                span = answer.offsets_in_document[0]
                assert answer.context[span.start : span.end] == answer.answer
            i += 1
            reads.append(no)

    errors = _run_threads(lambda no: writer() if no == 0 else reader(no), n=6)
    assert errors == [], errors[:3]
    assert len(reads) >= 15
    assert_store_consistent(store)
    # the final state equals a store built in one go from the same documents
    fresh = PhraseDocumentStore(progress_bar=False)
    fresh_retriever = PhraseRetriever(document_store=fresh, model=retriever.model, top_k=4, device="cpu")
    fresh.write_documents(store.get_all_documents())
    fresh.update_embeddings(fresh_retriever)
    assert sorted(fresh.get_phrase_index().live_passage_ids()) == sorted(store.get_phrase_index().live_passage_ids())
    for q in squad_questions[:8]:
        assert [d.id for d in retriever.retrieve(q)] == [d.id for d in fresh_retriever.retrieve(q)]
    reloaded = PhraseDocumentStore.load(tmp_path / "live-save")
    assert sorted(d.id for d in reloaded.get_all_documents()) == sorted(d.id for d in store.get_all_documents())


def test_a_search_waits_for_a_write_and_a_write_waits_for_searches(retriever, squad_questions):
    """The store's lock orders them: a write that starts during a search completes after it, and the reverse."""
    store = retriever.document_store
    events: list[str] = []
    with store.reading():
        writer = threading.Thread(target=lambda: (store.delete_documents(ids=["nothing"]), events.append("write")))
        writer.start()
        time.sleep(0.2)
        events.append("read done")
    writer.join(timeout=10)
    assert events == ["read done", "write"]
    events.clear()
    with store._lock.write():
        reader = threading.Thread(target=lambda: (retriever.retrieve(squad_questions[0]), events.append("read")))
        reader.start()
        time.sleep(0.2)
        events.append("write done")
    reader.join(timeout=30)
    assert events == ["write done", "read"]


def test_read_write_lock_semantics():
    from dphr_haystack.nodes._rwlock import ReadWriteLock

    lock = ReadWriteLock()
    with lock.write(), lock.write(), lock.read():  # re-entrant; a writer may read
        pass
    with lock.read(), lock.read():
        with pytest.raises(RuntimeError, match="read lock"):
            with lock.write():
                pass
    all_inside = threading.Barrier(4, timeout=10)

    def reader(_no: int) -> None:
        with lock.read():
            all_inside.wait()  # passes only if all four readers hold the read lock at once

    assert _run_threads(reader, n=4) == []  # readers overlap (else BrokenBarrierError)
    # a waiting writer is not starved by a stream of new readers
    order: list[str] = []
    stop = threading.Event()

    def busy_reader(_no: int) -> None:
        while not stop.is_set():
            with lock.read():
                time.sleep(0.01)

    readers = [threading.Thread(target=busy_reader, args=(n,)) for n in range(3)]
    for t in readers:
        t.start()
    time.sleep(0.05)
    started = time.monotonic()
    with lock.write():
        order.append("write")
    waited = time.monotonic() - started
    stop.set()
    for t in readers:
        t.join()
    assert order == ["write"] and waited < 2.0
    import copy

    assert isinstance(copy.deepcopy(lock), ReadWriteLock)
