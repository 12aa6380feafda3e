"""Run indexing jobs in child processes that are SIGKILLed part-way, for the crash-safety tests.

A *zygote* process imports dphr_haystack (and Haystack) once, then forks one child per job, so each job starts
in milliseconds. A child can be killed two ways:

* ``kill_at=N``: the child SIGKILLs itself just before its N-th durability step: ``os.fsync``, ``os.replace``,
  ``os.rename``, ``shutil.rmtree``, the atomic directory exchange or the commit of a store database transaction
  (SQLite fsyncs in C: the kill lands just before its ``COMMIT``). Every step of a commit or a save is a possible
  crash point, so a test can walk through all of them.
* ``kill_after``: the test SIGKILLs the child from outside after that many seconds (a crash at a random moment).

Protocol: one JSON job per line on the zygote's stdin; it answers ``{"started": pid}`` and, when the child has
ended, ``{"pid", "code", "signal", "steps"}`` (``steps``: durability steps the child took, when it exited
normally).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------- jobs (run in the forked child)
def job_index(model: str, corpus: str, out: str, chunk_size: int = 4, extra: list[str] | None = None) -> int:
    """``dphr index`` (resumable: a second run over the same --out continues)."""
    from dphr_haystack.cli import main

    return main(
        [
            "index",
            "--model",
            model,
            "--corpus",
            corpus,
            "--out",
            out,
            "--chunk-size",
            str(chunk_size),
            "--batch-size",
            "8",
            "--device",
            "cpu",
            "--no-progress",
            *(extra or []),
        ]
    )


def job_store_update(path: str, model: str, batch_size: int = 4) -> int:
    """Load a saved PhraseDocumentStore, encode the documents that lack phrases, save it back."""
    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    store = PhraseDocumentStore.load(path)
    retriever = PhraseRetriever(document_store=store, model=model, top_k=5, device="cpu", batch_size=8)
    store.update_embeddings(retriever, batch_size=batch_size)
    store.save(path)
    return 0


def job_store_edit(path: str, model: str, corpus: str, delete: list[str], add_from: int, batch_size: int = 4) -> int:
    """Load a saved store, delete some documents, add new ones with phrases (committed in place), save it back."""
    from haystack.schema import Document

    from dphr_haystack.nodes import PhraseDocumentStore, PhraseRetriever

    passages = [json.loads(line) for line in Path(corpus).read_text(encoding="utf-8").splitlines()]
    store = PhraseDocumentStore.load(path)
    retriever = PhraseRetriever(document_store=store, model=model, top_k=5, device="cpu", batch_size=8)
    store.delete_documents(ids=delete)
    store.write_documents(
        [Document(content=p["text"], id=p["id"], meta={"title": p["title"]}) for p in passages[add_from:]]
    )
    store.update_embeddings(retriever, batch_size=batch_size)
    store.save(path)
    return 0


def job_index_save(model: str, corpus: str, out: str) -> int:
    """Build an in-memory phrase index and save it over an existing index directory."""
    from dphr_haystack import PhraseIndex, PhraseModel
    from dphr_haystack.encode.add import add_passages

    phrase_model = PhraseModel.load(model)
    index = PhraseIndex.create(phrase_model)
    add_passages(index, phrase_model, corpus, progress=False)
    index.save(out)
    return 0


JOBS = {
    "index": job_index,
    "store_update": job_store_update,
    "store_edit": job_store_edit,
    "index_save": job_index_save,
}


def _arm(kill_at: int | None, counter: list[int]) -> None:
    """Count durability steps; SIGKILL this process just before step ``kill_at``."""
    import shutil

    from dphr_haystack._util import atomic as _atomic

    def wrap(owner, name):
        original = getattr(owner, name)

        def step(*args, **kwargs):
            counter[0] += 1
            if kill_at is not None and counter[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return original(*args, **kwargs)

        setattr(owner, name, step)

    for owner, name in ((os, "fsync"), (os, "replace"), (os, "rename"), (shutil, "rmtree"), (_atomic, "exchange")):
        wrap(owner, name)
    _arm_database(kill_at, counter)


def _arm_database(kill_at: int | None, counter: list[int]) -> None:
    """Count each store database commit as a durability step (SIGKILL just before its ``COMMIT``)."""
    import contextlib

    from dphr_haystack.documents.database import StoreDatabase

    begin = StoreDatabase._begin

    @contextlib.contextmanager
    def counted(self, immediate: bool = True):
        with begin(self, immediate):
            yield
            if immediate and self._depth == 1:  # the outermost transaction, about to commit
                counter[0] += 1
                if kill_at is not None and counter[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)

    StoreDatabase._begin = counted


def run_forked(open_store, job, kill_at: int) -> tuple[int | None, int]:
    """Run ``job(open_store())`` in a forked child SIGKILLed just before its ``kill_at``-th durability step (0:
    never); returns (the signal that ended the child, its durability steps)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        os.close(read)
        counter, code = [0], 3
        try:
            store = open_store()
            _arm(kill_at or None, counter)
            job(store)
            code = 0
        except BaseException:
            traceback.print_exc()
            code = 4
        os.write(write, str(counter[0]).encode())
        os._exit(code)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    steps = os.read(read, 64)
    os.close(read)
    assert not os.WIFEXITED(status) or os.WEXITSTATUS(status) == 0, status
    return (os.WTERMSIG(status) if os.WIFSIGNALED(status) else None), int(steps or 0)


def _child(job: dict) -> None:
    log = os.open(job.get("log", os.devnull), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    counter = [0]
    code = 3
    try:
        import torch

        torch.set_num_threads(1)
        _arm(job.get("kill_at"), counter)
        code = JOBS[job["kind"]](**job["args"])
    except BaseException:
        traceback.print_exc()
        code = 4
    finally:
        if job.get("steps_file"):
            Path(job["steps_file"]).write_text(str(counter[0]))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def zygote_main() -> None:
    import torch  # noqa: F401  (imported once, before any fork)

    import dphr_haystack.cli
    import dphr_haystack.nodes  # noqa: F401

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(job)
        print(json.dumps({"started": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        steps = None
        if job.get("steps_file") and Path(job["steps_file"]).is_file():
            steps = int(Path(job["steps_file"]).read_text() or 0)
        print(
            json.dumps(
                {
                    "pid": pid,
                    "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                    "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                    "steps": steps,
                }
            ),
            flush=True,
        )


# ----------------------------------------------------------------- test side
class Zygote:
    """The test's handle on a zygote process."""

    def __init__(self, log_dir: Path) -> None:
        env = dict(
            os.environ,
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            TOKENIZERS_PARALLELISM="false",
            HAYSTACK_TELEMETRY_ENABLED="False",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        )
        self.log_dir = log_dir
        self.jobs = 0
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability._crash"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        assert json.loads(self._read())["ready"]

    def _read(self) -> str:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the crash zygote died (exit {self.process.poll()})")
        return line

    def run(self, kind: str, kill_at: int | None = None, kill_after: float | None = None, **args) -> dict:
        """Run a job; returns ``{"code", "signal", "steps", "log"}``."""
        self.jobs += 1
        log = self.log_dir / f"job-{self.jobs}-{kind}.log"
        steps_file = self.log_dir / f"job-{self.jobs}.steps"
        job = {"kind": kind, "args": args, "kill_at": kill_at, "log": str(log), "steps_file": str(steps_file)}
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        pid = json.loads(self._read())["started"]
        if kill_after is not None:
            time.sleep(kill_after)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        result = json.loads(self._read())
        result["log"] = log.read_text() if log.is_file() else ""
        return result

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


if __name__ == "__main__":
    zygote_main()
