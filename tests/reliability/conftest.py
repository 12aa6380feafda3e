"""Fixtures for the reliability tests: a saved tiny model, SQuAD passages, one torch thread, fuzz bookkeeping."""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from pathlib import Path

import pytest

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tests.conftest import SQUAD_DEV, load_squad_paragraphs, squad_passage_records
from tests.reliability import _fuzz


@pytest.fixture(autouse=True)
def _one_torch_thread(one_torch_thread):
    yield


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, _tiny_model_session) -> Path:
    """The session's tiny phrase model saved as a model directory (what the CLI and YAML pipelines load)."""
    path = tmp_path_factory.mktemp("reliability-model")
    _tiny_model_session.save(path)
    return path


@pytest.fixture(scope="session")
def squad_passages() -> list[dict]:
    """40 SQuAD dev paragraphs as passages; without the data, copies of the six tiny ones under distinct ids (the
    crash tests count commit steps of 40 passages)."""
    return squad_passage_records(40)


@pytest.fixture(scope="session")
def squad_questions() -> list[str]:
    if not SQUAD_DEV.is_file():
        return ["capital of france", "who wrote hamlet", "highest mountain", "python language"]
    return [qa["question"] for p in load_squad_paragraphs(SQUAD_DEV, 40) for qa in p["qas"][:1]]


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory, squad_passages) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in squad_passages), encoding="utf-8")
    return path


@pytest.fixture(params=[pytest.param("ci", marks=pytest.mark.unit), pytest.param("full", marks=pytest.mark.slow)])
def fuzz_profile(request) -> str:
    """``ci``: the few-hundred-case default run; ``full`` (marked slow): DPHR_FUZZ_EXAMPLES cases in total."""
    return request.param


class FuzzLog:
    """Hypothesis examples run by one fuzz test, and the outcome (``ok`` or a typed error) of each operation."""

    def __init__(self) -> None:
        self.examples = 0
        self.outcomes: Counter = Counter()

    def example(self) -> None:
        self.examples += 1

    def record(self, operation: str, outcome: str) -> str:
        self.outcomes[f"{operation}:{outcome}"] += 1
        return outcome


_LOGS: dict[str, FuzzLog] = defaultdict(FuzzLog)


@pytest.fixture
def fuzz_log(request, fuzz_profile) -> FuzzLog:
    return _LOGS[f"{request.node.originalname}[{fuzz_profile}]"]


def pytest_terminal_summary(terminalreporter) -> None:
    if not _LOGS:
        return
    terminalreporter.section("dphr fuzz cases")
    total = 0
    for name, log in sorted(_LOGS.items()):
        total += log.examples
        terminalreporter.write_line(f"{name}: {log.examples} cases, operations {dict(log.outcomes.most_common())}")
    terminalreporter.write_line(f"total: {total} fuzz cases (hypothesis examples)")
    report = os.environ.get("DPHR_FUZZ_REPORT")
    if report:
        payload = {
            "total_cases": total,
            "budget": _fuzz.budget_summary(),
            "tests": {
                name: {"cases": log.examples, "operations": dict(log.outcomes)} for name, log in sorted(_LOGS.items())
            },
        }
        Path(report).write_text(json.dumps(payload, indent=1))
