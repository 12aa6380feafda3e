"""The device kit (scripts/device/): stages within the call limit, assembly, the trainer's time budget, the export
within ``$OUT``'s limits and the restore, rehearsed end to end on a tiny model (scripts/device/rehearsal.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from scripts.device import assemble as assemble_mod
from scripts.device import pack, rehearsal, travel
from scripts.device.export import ExportLimitError, OutFile, plan_out
from scripts.device.kit import (
    MIB,
    CorruptPieceError,
    KitError,
    MissingPiecesError,
    OutLimits,
    out_problems,
    tree_files,
)
from train.trainer import TimeBudgetReached, TrainArgs

pytestmark = pytest.mark.unit

BUDGET_RUN = {
    "stages": ["rc"],
    "rc.select_on": None,
    "rc.pre_batch": 0,  # the pre-batch queue lives in memory only: without it a resumed run is the same run
    "rc.train": {"max_steps": 5, "batch_size": 4, "lr": 1.0e-3, "log_every": 1, "save_every": 100, "progress": False},
}


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_max_minutes_must_be_positive():
    with pytest.raises(ValueError, match="max_minutes"):
        TrainArgs(max_minutes=0)
    assert TrainArgs(max_minutes=0.5).max_minutes == 0.5 and TrainArgs().max_minutes is None


def test_time_budget_stops_with_a_checkpoint_and_the_rerun_resumes_to_the_same_weights(run_tiny_recipe, tmp_path):
    from dphr_haystack import PhraseModel

    budget = {**BUDGET_RUN, "rc.train": {**BUDGET_RUN["rc.train"], "max_minutes": 1.0e-6}}
    with pytest.raises(TimeBudgetReached, match="step 1 of 5"):
        run_tiny_recipe({**budget, "output_dir": str(tmp_path / "cut")}, "rc")
    cut = tmp_path / "cut" / "rc"
    assert [p.name for p in cut.glob("checkpoint-*")] == ["checkpoint-1"] and not (cut / "final").exists()
    assert _records(cut / "metrics.jsonl")[-1]["stopped"]["reason"] == "max_minutes"
    resumed = run_tiny_recipe({**BUDGET_RUN, "output_dir": str(tmp_path / "cut")}, "rc")
    assert resumed["steps"] == 5
    assert [r["step"] for r in _records(cut / "metrics.jsonl") if "loss" in r] == [1, 2, 3, 4, 5]
    whole = run_tiny_recipe({**BUDGET_RUN, "output_dir": str(tmp_path / "whole")}, "rc")
    got = PhraseModel.load(resumed["final"]).state_dict()
    want = PhraseModel.load(whole["final"]).state_dict()
    for key, value in want.items():
        torch.testing.assert_close(got[key], value, rtol=0, atol=1e-6, msg=key)


def test_the_cli_exits_3_when_the_budget_stops_a_stage(tiny_base_dir, tmp_path, capsys):
    from train.cli import main

    threads = torch.get_num_threads()
    try:
        code = main(
            [
                "rc",
                "--config",
                "train/configs/smoke.yaml",
                "--output-dir",
                str(tmp_path / "cli"),
                "--quiet",
                "--set",
                f"model.base={tiny_base_dir}",
                "--set",
                "data.train=builtin",
                "--set",
                "data.dev=builtin",
                "--set",
                "rc.select_on=null",
                "--set",
                "rc.train.max_minutes=1.0e-6",
                "--set",
                "rc.train.progress=false",
            ]  # fmt: skip
        )
    finally:
        torch.set_num_threads(threads)
    assert code == 3
    assert "run the same command again to resume" in capsys.readouterr().err
    assert (tmp_path / "cli" / "rc" / "checkpoint-1" / "trainer_state.pt").is_file()


def test_stages_hold_every_byte_once_and_stay_within_the_capacity():
    entries = [
        {"path": "base/config.json", "bytes": 600},
        {"path": "base/model.safetensors", "bytes": 45_000},
        {"path": "data/empty.json", "bytes": 0},
        {"path": "data/dev.json.gz", "bytes": 900, "from_tree": "shipped/dev.json.gz"},
        {"path": "data/train.json.gz", "bytes": 9_000},
    ]
    stages = pack.split_into_stages(entries, capacity=20_000)
    assert stages == 3  # ceil(54,600 / 20,000)
    per_stage: dict[int, int] = {}
    for entry in entries:
        if "from_tree" in entry:
            assert "pieces" not in entry  # it travels with the tree
            continue
        offset = 0
        for piece in entry["pieces"]:
            assert piece["offset"] == offset
            offset += piece["bytes"]
            per_stage[piece["stage"]] = per_stage.get(piece["stage"], 0) + piece["bytes"]
        assert offset == entry["bytes"] and entry["pieces"]
    assert sum(per_stage.values()) == 54_600 and max(per_stage.values()) <= 20_000
    assert max(per_stage.values()) - min(per_stage.values()) <= 1  # filled evenly
    assert len({p["stage"] for p in entries[1]["pieces"]}) >= 2  # the large file is cut


def test_travel_hides_the_shipped_weights_from_the_call_and_restores_them(tmp_path):
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    shard = tmp_path / "dphr_haystack" / "shipped_models" / "m" / "model-00001.safetensors"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"w" * 100)
    (tmp_path / "keep.py").write_text("x = 1\n")
    (tmp_path / ".git" / "info").mkdir(exist_ok=True)
    (tmp_path / ".git" / "info" / "exclude").write_text("/mine/\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    assert travel.hide(tmp_path) == ["dphr_haystack/shipped_models/m/model-00001.safetensors"]
    assert tree_files(tmp_path) == [tmp_path / "keep.py"] and shard.is_file()  # kept on disk, not travelling
    with pytest.raises(KitError, match="hidden already"):
        travel.hide(tmp_path)
    assert travel.restore(tmp_path) == ["dphr_haystack/shipped_models/m/model-00001.safetensors"]
    assert git("status", "--porcelain") == "" and shard in tree_files(tmp_path)
    assert (tmp_path / ".git" / "info" / "exclude").read_text() == "/mine/\n"
    assert travel.restore(tmp_path) == []  # nothing hidden: a no-op


def test_the_out_plan_drops_optional_files_by_priority_and_refuses_what_cannot_fit(tmp_path):
    def file(name: str, size: int, required: bool, priority: int = 0) -> OutFile:
        (tmp_path / name).write_bytes(b"x" * size)
        return OutFile(name, tmp_path / name, required, priority)

    limits = OutLimits(max_files=4, max_file_bytes=1000, max_total_bytes=4000)
    files = [
        file("a.safetensors", 900, True),
        file("b.safetensors", 900, True),
        file("probe.safetensors", 100, False, 3),
        file("curves.png", 200, False, 1),
        file("big.log", 1500, False, 2),
    ]
    kept, left_out = plan_out(files, limits)
    assert [f.name for f in kept] == ["a.safetensors", "b.safetensors", "probe.safetensors"]  # + summary.json = 4
    assert {item["name"] for item in left_out} == {"big.log", "curves.png"}
    assert "per file" in next(item["why"] for item in left_out if item["name"] == "big.log")
    with pytest.raises(ExportLimitError, match="required files alone"):
        plan_out([file(f"s{i}.safetensors", 100, True) for i in range(4)], limits)
    with pytest.raises(ExportLimitError, match="per file"):
        plan_out([file("huge.safetensors", 1001, True)], limits)
    with pytest.raises(ExportLimitError, match="name"):
        plan_out([file("bad name", 10, True)], limits)


def test_out_problems_names_each_broken_limit(tmp_path):
    limits = OutLimits(max_files=3, max_file_bytes=100, max_total_bytes=250, max_depth=1)
    (tmp_path / "ok.json").write_bytes(b"x" * 90)
    assert out_problems(tmp_path, limits) == []
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "deep.txt").write_bytes(b"x")
    (tmp_path / "big.bin").write_bytes(b"x" * 160)
    (tmp_path / "sp ace").write_bytes(b"x")
    problems = "\n".join(out_problems(tmp_path, limits))
    for expected in ("big.bin: 0.00 MiB > 0.00 MiB", "folders down", "name outside", "4 files > 3", "in all"):
        assert expected in problems


def test_assemble_names_what_is_missing_and_refuses_a_damaged_piece(tmp_path, one_torch_thread):
    inputs = rehearsal.make_inputs(tmp_path / "in")
    cpu = tmp_path / "cpu" / ".device"
    manifest = pack.pack(cpu, str(inputs["base"]), str(inputs["train"]), str(inputs["dev"]), stage_bytes=40_000)
    stages = [s["name"] for s in manifest["stages"]]
    assert len(stages) >= 3
    device = tmp_path / "device" / ".device"
    shutil.copytree(cpu / stages[0], device / stages[0])
    report = assemble_mod.status(device)
    assert report["stages_present"] == stages[:1] and report["stages_missing"] == stages[1:]
    with pytest.raises(MissingPiecesError) as missing:
        assemble_mod.assemble(device)
    assert all(name in str(missing.value) for name in stages[1:]) and stages[0] not in str(missing.value)
    for name in stages[1:]:
        shutil.copytree(cpu / name, device / name)
    victim = next((device / stages[1]).glob("0*"))
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(CorruptPieceError, match=victim.name):
        assemble_mod.assemble(device)
    shutil.copyfile(cpu / stages[1] / victim.name, victim)
    done = assemble_mod.assemble(device)
    assert not done["reused"] and assemble_mod.assemble(device)["reused"]
    from safetensors.torch import load_file

    widened = load_file(str(device / "assembled" / "base" / "model.safetensors"))
    original = load_file(str(inputs["base"] / "model.safetensors"))
    for key, tensor in original.items():  # float32 again, equal to the base after its float16 round trip
        assert widened[key].dtype == torch.float32
        assert torch.equal(widened[key], tensor.to(torch.float16).to(torch.float32))


@pytest.mark.integration
@pytest.mark.parametrize(("base_kind", "adapters"), [("bert", 0), ("mpnet", 0), ("mpnet", 4)])
def test_rehearsal_of_the_whole_device_sequence(tmp_path, one_torch_thread, base_kind, adapters):
    """pack → stage carries (check calls, one with the smoke run) → a training call without the last stage fails
    naming it → a training call stopped by its budget → a call resuming it → restore of both calls' files; on a
    BERT-shaped base (MiniLM's family) and an MPNet-shaped one (all-mpnet-base-v2's), the latter also training
    low-rank adapters (the call then brings back the adapters, the encoders' own weights stay the base's)."""
    from dphr_haystack import PhraseModel
    from dphr_haystack.model.weights import read_base_state

    work = tmp_path / "work"
    report = rehearsal.rehearse(work, base_kind=base_kind, adapters=adapters)  # AssertionError on any broken step
    assert len(report["stages"]) >= 3 and "stage-" in report["missing_stage_message"]
    assert report["exported"] == ["rc/checkpoint-1", "rc/best"] and report["resumed_after_step"] == 1
    assert (
        len(report["out_files"]) <= 8 and max(report["out_files"].values()) <= rehearsal.SCALED["out_file_mib"] * MIB
    )
    assert [item["name"] for item in report["left_out"]] == ([] if adapters else ["curves.png"])
    for check in (report["restore"]["probe"], report["restore"]["reference"], report["restore_partial"]["probe"]):
        assert check["min_cosine"] >= 0.9999 and check["max_rel_diff"] <= 0.005
    # The rebuilt model holds the device's trained tensors to float16 and this machine's base tensors exactly.
    restored_model = PhraseModel.load(work / "restored")
    restored = restored_model.state_dict()
    device = PhraseModel.load(work / "device-side" / ".device" / "runs" / rehearsal.NAME / "rc" / "final").state_dict()
    base = read_base_state(str(work / "cpu" / "base"))
    frozen = report["restore"]["from_base"]
    assert any("word_embeddings" in key for key in frozen)
    for key, tensor in device.items():
        if key.endswith(("position_ids", "token_type_ids")):
            continue
        if key in frozen:
            prefix = key.split(".")[0] + "."
            assert torch.equal(restored[key], base[key[len(prefix) :]]), key
        else:
            assert torch.equal(restored[key], tensor.to(torch.float16).to(torch.float32)) or key.startswith(
                "filter_linear."
            ), key
    assert set(restored) == set(device)
    if adapters:  # only the adapters, heads, filter and norms came back: every layer's linear weights are the base's
        assert restored_model.config.adapters["rank"] == adapters
        assert any(key.endswith("lora_b") for key in restored) and all("lora_" not in key for key in frozen)
        layer_weights = [k for k in restored if ".layer." in k and k.endswith(".weight") and "LayerNorm" not in k]
        assert layer_weights and all(key in frozen for key in layer_weights)
