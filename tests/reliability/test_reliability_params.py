"""Numeric parameters are range-checked in one place (``dphr_haystack.params``) and refused alike by the CLI (a
one-line message, exit status 2, no traceback, nothing written), the Python API and Haystack YAML, with an error
naming the parameter, its value and the allowed range. The cases the CLI used to get wrong come first."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest
import yaml

from dphr_haystack import InvalidParameterError, PhraseIndex, PhraseModelConfig, PhraseSearcher, dump_phrases
from dphr_haystack.cli import _parser
from dphr_haystack.cli import main as dphr
from dphr_haystack.encode.add import add_passages
from dphr_haystack.params import PARAMS, check_param

pytestmark = pytest.mark.unit


def _cli_error(capsys, argv: list[str]) -> str:
    """Run ``dphr argv``; it must exit with status 2 and one clear message. Returns stderr."""
    try:
        code = dphr(argv)
    except SystemExit as exc:  # argparse refusing an option value
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and "error:" in err
    return err


@pytest.mark.parametrize(
    ("flag", "value", "name"),
    [
        ("--batch-size", "-4", "batch_size"),  # used to build an index of all-zero vectors and exit 0
        ("--batch-size", "0", "batch_size"),  # used to end in a traceback
        ("--chunk-size", "-1", "chunk_size"),  # used to end in a traceback
        ("--chunk-size", "0", "chunk_size"),  # used to report "the corpus has no passage with text"
        ("--batch-size", "2.5", "batch_size"),
    ],
)
def test_cli_index_refuses_bad_counts(model_dir, corpus_file, tmp_path, capsys, flag, value, name):
    out = tmp_path / "idx"
    err = _cli_error(
        capsys, ["index", "--model", str(model_dir), "--corpus", str(corpus_file), "--out", str(out), flag, value]
    )
    assert name in err and value in err
    assert not out.exists()


@pytest.fixture(scope="module")
def built_index(tmp_path_factory, model_dir, corpus_file):
    out = tmp_path_factory.mktemp("params") / "idx"
    args = ["index", "--model", str(model_dir), "--corpus", str(corpus_file), "--out", str(out), "--no-progress"]
    assert dphr([*args, "--device", "cpu"]) == 0
    return out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--max-answer-length", "100000000"],
            "max_answer_length=100000000 is out of range: an integer from 1 to 512",
        ),
        (["--max-answer-length", "0"], "max_answer_length=0 is out of range"),  # used to become 10 silently
        (["--max-answer-length", "49"], "from 1 to 48 (the model's passage window of 48 subwords)"),
        (["--top-k", "0"], "top_k=0 is out of range"),
        (["--top-k", "-3"], "top_k=-3 is out of range"),
    ],
)
def test_cli_search_refuses_bad_values(built_index, capsys, args, expected):
    err = _cli_error(capsys, ["search", "--index", str(built_index), *args, "capital of France"])
    assert expected in err


def test_cli_search_max_answer_length_within_the_window_runs(built_index, capsys):
    assert dphr(["search", "--index", str(built_index), "--max-answer-length", "48", "--json", "capital"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["results"]


@pytest.mark.parametrize(
    "argv",
    [
        ["dump", "--corpus", "c", "--out", "o", "--shard-size", "0"],
        ["dump", "--corpus", "c", "--out", "o", "--num-workers", "0"],
        ["dump", "--corpus", "c", "--out", "o", "--worker", "-1"],
        ["dump", "--corpus", "c", "--out", "o", "--cpus-per-worker", "0"],
        ["dump", "--corpus", "c", "--out", "o", "--gpus-per-worker", "nan"],
        ["merge", "--dump", "d", "--out", "o", "--nlist", "0"],
        ["reindex", "--index", "i", "--nprobe", "-1"],
        ["eval", "--index", "i", "--questions", "q", "--top-k", "0"],
        ["eval", "--index", "i", "--questions", "q", "--limit", "0"],
        ["model", "init", "--base", "b", "--out", "o", "--max-passage-length", "8"],
        ["model", "export", "--model", "m", "--out", "o", "--max-shard-mb", "0"],
    ],
)
def test_every_command_refuses_out_of_range_values(capsys, argv):
    err = _cli_error(capsys, argv)
    assert "out of range" in err or "is not" in err


def test_every_numeric_cli_option_is_checked_by_the_params_table():
    """No ``type=int``/``type=float`` option escapes the table (the seed is any integer on purpose)."""
    unchecked = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif action.type in (int, float) and action.dest != "seed":
                unchecked.append(f"{path} {action.option_strings}")
            elif action.dest in PARAMS:
                assert getattr(action.type, "__name__", None) == action.dest, f"{path} {action.option_strings}"

    walk(_parser(), "dphr")
    assert unchecked == []


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_the_table_accepts_its_bounds_and_refuses_beyond(name):
    allowed = PARAMS[name]
    for good in (allowed.low if not allowed.low_open else None, allowed.high):
        if good is not None:
            assert check_param(name, allowed.kind(good)) == good
    bad = [True, "3", None, math.nan, math.inf]
    if allowed.low is not None:
        bad.append(allowed.low if allowed.low_open else allowed.low - 1)
    if allowed.high is not None:
        bad.append(allowed.high + 1)
    if allowed.kind is int:
        bad.append(2.5)
    for value in bad:
        with pytest.raises(InvalidParameterError, match=f"^{name}=") as caught:
            check_param(name, value)
        assert allowed.describe() in str(caught.value)  # names the allowed range


def test_numpy_integers_are_integers():
    assert check_param("top_k", np.int64(7)) == 7
    with pytest.raises(InvalidParameterError):
        check_param("top_k", np.True_)


def test_python_api_checks_the_same_ranges(tiny_model, squad_passages, tmp_path):
    window = tiny_model.config.max_passage_length
    index = PhraseIndex.create(tiny_model)
    for kwargs, name in (({"batch_size": -4}, "batch_size"), ({"chunk_size": 0}, "chunk_size")):
        with pytest.raises(InvalidParameterError, match=f"{name}="):
            add_passages(index, tiny_model, squad_passages[:3], **kwargs, progress=False)
    assert index.num_passages == 0
    # a negative batch size used to skip every window and return all-zero vectors
    with pytest.raises(InvalidParameterError, match="batch_size=-4"):
        tiny_model.encode_passages(["Paris is the capital of France."], batch_size=-4)
    with pytest.raises(InvalidParameterError, match="batch_size=0"):
        tiny_model.encode_queries(["capital"], batch_size=0)
    add_passages(index, tiny_model, squad_passages[:3], progress=False)
    for value in (0, -1, window + 1, 10**8, 2.5, True):
        with pytest.raises(InvalidParameterError, match="max_answer_length="):
            PhraseSearcher(index, tiny_model, max_answer_length=value)
    assert PhraseSearcher(index, tiny_model, max_answer_length=window).max_answer_length == window
    assert PhraseSearcher(index, tiny_model).max_answer_length == tiny_model.config.max_answer_length
    # without a model, the window the index records bounds it
    with pytest.raises(InvalidParameterError, match=f"from 1 to {window}"):
        PhraseSearcher(index, None, max_answer_length=window + 1)
    searcher = PhraseSearcher(index, tiny_model)
    for top_k in (0, -2, 10**9):
        with pytest.raises(InvalidParameterError, match="top_k="):
            searcher.search("capital", top_k=top_k, unit="phrase")
    with pytest.raises(InvalidParameterError, match="batch_size=0"):
        PhraseSearcher(index, tiny_model, batch_size=0)
    for kwargs in ({"shard_size": 0}, {"batch_size": -1}, {"worker": 2, "num_workers": 2}, {"num_workers": 0}):
        with pytest.raises(InvalidParameterError):
            dump_phrases(tiny_model, squad_passages[:2], tmp_path / "dump", progress=False, **kwargs)
    assert not (tmp_path / "dump").exists()


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"max_answer_length": 0}, "max_answer_length=0"),
        ({"max_answer_length": 600}, "max_answer_length=600"),
        ({"max_passage_length": 64, "passage_stride": 8, "max_answer_length": 65}, "passage window"),
        ({"max_passage_length": 10}, "max_passage_length=10"),
        ({"max_query_length": 2}, "max_query_length=2"),
        ({"max_title_length": -1}, "max_title_length=-1"),
        ({"passage_stride": 300}, "passage_stride=300"),
    ],
)
def test_model_config_ranges(kwargs, expected):
    with pytest.raises(InvalidParameterError, match=expected):
        PhraseModelConfig(**kwargs)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"top_k": 0}, "top_k=0"),
        ({"batch_size": -4}, "batch_size=-4"),
        ({"max_answer_length": 100000000}, "max_answer_length=100000000"),
        ({"max_answer_length": 49}, "passage window of 48"),
    ],
)
def test_yaml_node_params_are_range_checked(model_dir, tmp_path, params, expected):
    pytest.importorskip("haystack")
    from dphr_haystack.nodes import load_pipeline

    config = {
        "version": "ignore",
        "components": [
            {"name": "DocumentStore", "type": "PhraseDocumentStore", "params": {"progress_bar": False}},
            {
                "name": "Retriever",
                "type": "PhraseRetriever",
                "params": {"document_store": "DocumentStore", "model": str(model_dir), "device": "cpu", **params},
            },
        ],
        "pipelines": [{"name": "query", "nodes": [{"name": "Retriever", "inputs": ["Query"]}]}],
    }
    file = tmp_path / "pipeline.yml"
    file.write_text(yaml.safe_dump(config))
    with pytest.raises(InvalidParameterError, match=expected):
        load_pipeline(file)


def test_haystack_nodes_check_counts(model_dir):
    pytest.importorskip("haystack")
    from dphr_haystack.nodes import LinearFusionJoin, PhraseDocumentStore, PhraseHybridJoin, PhraseRetriever

    with pytest.raises(InvalidParameterError, match="top_k_join=0"):
        LinearFusionJoin(top_k_join=0)
    with pytest.raises(InvalidParameterError, match="top_k_answers=-1"):
        PhraseHybridJoin(top_k_answers=-1)
    with pytest.raises(InvalidParameterError, match="embedding_dim=0"):
        PhraseDocumentStore(embedding_dim=0)
    retriever = PhraseRetriever(document_store=PhraseDocumentStore(progress_bar=False), model=str(model_dir))
    with pytest.raises(InvalidParameterError, match="top_k=-1"):
        retriever.retrieve("capital", top_k=-1)
