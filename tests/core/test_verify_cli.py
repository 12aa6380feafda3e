"""``dphr search --verify``: off by default and then the output is as before; on, the same results with every
answer's confidence moved by the same log-odds (a reader read the top answer); a model without a verification is
refused with status 2 and the command that fits one."""

from __future__ import annotations

import copy
import math

import pytest

from dphr_haystack.cli import main
from tests.core.test_answers_every_unit import save_calibrated, save_verified
from tests.core.test_no_answer_cli import _error, _index, _json

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def verified_index(tmp_path_factory, _tiny_model_session, tiny_reader_dir) -> str:
    tmp = tmp_path_factory.mktemp("verify-cli")
    return _index(tmp, save_verified(copy.deepcopy(_tiny_model_session), tmp / "model", tiny_reader_dir))


def test_verify_moves_every_confidence_alike_and_only_when_asked(capsys, verified_index):
    plain = _json(capsys, verified_index, "--unit", "phrase")
    verified = _json(capsys, verified_index, "--unit", "phrase", "--verify")
    assert [r["text"] for r in verified["results"]] == [r["text"] for r in plain["results"]]

    def logit(p: float) -> float:
        return math.log(p / (1 - p))

    shifts = [logit(v["confidence"]) - logit(p["confidence"]) for v, p in zip(verified["results"], plain["results"])]
    assert max(shifts) - min(shifts) < 1e-6 and abs(shifts[0]) > 1e-6
    assert _json(capsys, verified_index, "--unit", "phrase") == plain


def test_a_model_without_a_verification_is_refused(capsys, tmp_path, _tiny_model_session):
    index = _index(tmp_path, save_calibrated(copy.deepcopy(_tiny_model_session), tmp_path / "calibrated"))
    assert "train.verifier" in _error(capsys, ["search", "--index", index, "--verify", "Who wrote Hamlet?"])
    assert main(["search", "--index", index, "Who wrote Hamlet?"]) == 0
