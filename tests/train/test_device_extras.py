"""The device kit's reader way back (int8 pieces across calls, joined here), its encoding timer, and the filter
threshold set by a vector budget alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from scripts.device import reader_back, run
from scripts.device.encode_speed import encode_speed
from scripts.device.kit import MIB, KitError, out_problems
from train.filter_budget import choose, lowest_within


def _trained_reader(reader_dir: Path, run_dir: Path) -> Path:
    final = run_dir / "reader" / "final"
    shutil.copytree(reader_dir, final)
    return final


def test_the_reader_comes_back_in_parts_and_joins_to_the_same_spans(tiny_reader_dir, tmp_path, monkeypatch):
    from dphr_haystack.verification import SpanReader

    device_dir = tmp_path / ".device"
    _trained_reader(tiny_reader_dir, device_dir / "runs" / "r")
    monkeypatch.setattr(reader_back, "PIECE_BYTES", 40_000)  # many pieces from a tiny reader, so several parts
    monkeypatch.setattr(reader_back, "PIECES_PER_PART", 2)
    outs = []
    for part in range(1, 10):
        out = tmp_path / f"o{part}"
        argv = ["reader", "--name", "r", "--part", str(part), "--device-dir", str(device_dir), "--out", str(out)]
        assert run.main(argv) == 0
        assert not out_problems(out, run.OutLimits())
        outs.append(out)
        listing = json.loads((out / reader_back.PIECES).read_text())
        if part == listing["parts"]:
            break
    assert listing["parts"] == len(outs) >= 2 and len(listing["pieces"]) > 2
    with pytest.raises(KitError, match="pieces missing"):
        reader_back.join(outs[:-1], tmp_path / "joined")
    piece = outs[0] / listing["pieces"][0]["name"]
    original = piece.read_bytes()
    piece.write_bytes(b"x" + original[1:])
    with pytest.raises(KitError, match="differs"):
        reader_back.join(outs, tmp_path / "joined")
    piece.write_bytes(original)
    assert reader_back.main(["join", "--files", *map(str, outs), "--out", str(tmp_path / "joined")]) == 0

    question, context = "Where is the tower?", "The tower stands in Paris, near the river."
    before, after = SpanReader(tiny_reader_dir), SpanReader(tmp_path / "joined")
    assert before.model.config.to_dict()["hidden_size"] == after.model.config.to_dict()["hidden_size"]
    with torch.no_grad():
        a = before.tokenizer(question, context, return_tensors="pt")
        start_a = before.model(**a).start_logits
        start_b = after.model(**a).start_logits
    assert torch.allclose(start_a, start_b, atol=0.05 * float(start_a.abs().max()) + 1e-3)  # int8 weights


def test_a_part_beyond_the_last_is_refused(tiny_reader_dir, tmp_path):
    run_dir = tmp_path / "run"
    _trained_reader(tiny_reader_dir, run_dir)
    listing = reader_back.write_pieces(reader_back.reader_dir(run_dir), run_dir / "reader-back")
    assert listing["parts"] == 1 and listing["tar_bytes"] < 16 * MIB
    with pytest.raises(KitError, match="parts 1 to 1"):
        reader_back.copy_part(run_dir / "reader-back", 2, tmp_path / "out")
    with pytest.raises(KitError, match="no trained reader"):
        reader_back.reader_dir(tmp_path / "empty")


def test_encode_speed_times_the_dump_of_squad_paragraphs(tiny_model_dir, tmp_path, one_torch_thread):
    dev = Path("dphr_haystack/shipped_datasets/squad-dev/dev-v1.1-public.json.gz")
    result = encode_speed(tiny_model_dir, dev, passages=20, batch_size=8)
    assert result["passages"] == 20 and result["seconds"] > 0
    assert result["seconds_per_1k_passages"] == pytest.approx(1000 * result["seconds"] / 20)
    assert result["vectors_per_passage"] > 10  # no threshold: every context token is kept


def test_the_budget_threshold_is_the_lowest_within_the_budget(tiny_model, one_torch_thread):
    assert lowest_within({-1.0: 50.0, 0.0: 40.0, 0.5: 30.0}, 40.0) == 0.0
    assert lowest_within({-1.0: 50.0, 0.0: 45.0}, 40.0) is None
    passages = [
        {"text": "The tower stands in Paris, near the river, since 1889.", "title": "Tower"},
        {"text": "Rivers of Europe flow into several seas and one ocean.", "title": "Rivers"},
    ]
    result = choose(tiny_model, passages, budget=5.0, grid=[-2.0, -1.0, 0.0, 1.0, 2.0, 50.0])
    counts = result["counts"]
    assert all(counts[a] >= counts[b] for a, b in zip(sorted(counts), sorted(counts)[1:]))  # fewer as it rises
    assert result["threshold"] == lowest_within(counts, 5.0) and result["vectors_per_passage"] <= 5.0
    assert result["unfiltered_vectors_per_passage"] >= counts[-2.0]


def test_query_head_scale_multiplies_the_shared_heads_only(tiny_base_dir):
    from dphr_haystack import PhraseModel, PhraseModelConfig
    from train.context import scale_query_heads

    model = PhraseModel.from_base(
        tiny_base_dir, PhraseModelConfig(max_passage_length=48, passage_stride=8, query_layout="shared")
    )
    before = {k: v.clone() for k, v in model.state_dict().items()}
    scale_query_heads(model, 4.0)
    for key, value in model.state_dict().items():
        expected = before[key] * 4.0 if key.startswith(("query_start_head.", "query_end_head.")) else before[key]
        assert torch.equal(value, expected), key
    with pytest.raises(ValueError, match="positive"):
        scale_query_heads(model, 0.0)
    separate = PhraseModel.from_base(tiny_base_dir, PhraseModelConfig(max_passage_length=48, passage_stride=8))
    with pytest.raises(ValueError, match="shared"):
        scale_query_heads(separate, 2.0)
    assert scale_query_heads(separate, 1.0) is separate
