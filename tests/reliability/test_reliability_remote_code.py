"""A model directory never runs code: one whose loader files ask for custom code (``auto_map``) is refused with
RemoteCodeError naming the file, before transformers reads it, and never prompts. The module the ``auto_map`` names
would write a marker file if it were imported. Reached through ``PhraseModel.load``/``from_base``, ``dphr index
--model``, an index manifest's ``model_path`` (``dphr search``), the Haystack nodes and the trainer's teacher."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from dphr_haystack import ModelLoadError, PhraseModel
from dphr_haystack.cli import main as dphr
from dphr_haystack.errors import RemoteCodeError
from dphr_haystack.model.loading import load_model

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
_EVIL_MODULE = "import os, pathlib\npathlib.Path(os.environ['DPHR_PWNED']).write_text('ran')\n"


@pytest.fixture
def marker(tmp_path, monkeypatch) -> Path:
    """The file the directory's own code would write; no prompt may be shown and transformers is never asked."""
    import transformers

    path = tmp_path / "pwned"
    monkeypatch.setenv("DPHR_PWNED", str(path))

    def no_prompt(*args, **kwargs):
        raise AssertionError("a prompt was shown")

    def not_asked(*args, **kwargs):
        raise AssertionError("transformers was asked to load a directory that asks for remote code")

    monkeypatch.setattr("builtins.input", no_prompt)
    for auto in (transformers.AutoTokenizer, transformers.AutoConfig, transformers.AutoModel):
        monkeypatch.setattr(auto, "from_pretrained", not_asked)
    yield path
    assert not path.exists(), "the model directory's own code ran"


def _plant_auto_map(directory: Path, file_name: str) -> Path:
    """Add an ``auto_map`` to ``file_name`` (created if missing) pointing at a module beside it."""
    (directory / "evil_code.py").write_text(_EVIL_MODULE)
    file = directory / file_name
    data = json.loads(file.read_text()) if file.is_file() else {}
    if file_name == "config.json" or file_name == "encoder_config.json":
        data["auto_map"] = {"AutoConfig": "evil_code.EvilConfig", "AutoModel": "evil_code.EvilModel"}
    else:
        data["auto_map"] = {"AutoTokenizer": ["evil_code.EvilTokenizer", None]}
    file.write_text(json.dumps(data))
    return file


@pytest.fixture
def model_copy(model_dir, tmp_path) -> Path:
    return Path(shutil.copytree(model_dir, tmp_path / "model"))


@pytest.mark.parametrize("file_name", ["tokenizer_config.json", "encoder_config.json"])
def test_phrase_model_directory_with_auto_map_is_refused(model_copy, marker, file_name):
    planted = _plant_auto_map(model_copy, file_name)
    with pytest.raises(RemoteCodeError, match=re.escape(str(planted))) as caught:
        PhraseModel.load(model_copy)
    assert isinstance(caught.value, ModelLoadError)  # typed: callers catching ModelLoadError see it
    with pytest.raises(RemoteCodeError, match="auto_map"):
        load_model(model_copy)


def test_trust_remote_code_true_in_a_config_is_refused(model_copy, marker):
    file = model_copy / "tokenizer_config.json"
    file.write_text(json.dumps({**json.loads(file.read_text()), "trust_remote_code": True}))
    with pytest.raises(RemoteCodeError, match="trust_remote_code"):
        PhraseModel.load(model_copy)


@pytest.mark.parametrize("file_name", ["config.json", "tokenizer_config.json"])
def test_plain_encoder_directory_with_auto_map_is_refused(tiny_base_dir, tmp_path, marker, file_name):
    """A plain encoder directory (``from_base``, or ``load_model`` building an untrained phrase model on it)."""
    base = Path(shutil.copytree(tiny_base_dir, tmp_path / "base"))
    planted = _plant_auto_map(base, file_name)
    with pytest.raises(RemoteCodeError, match=re.escape(str(planted))):
        PhraseModel.from_base(base)
    with pytest.raises(RemoteCodeError, match=re.escape(str(planted))):
        load_model(base)


def test_densephrases_checkpoint_and_tokenizer_with_auto_map_are_refused(_tiny_model_session, tmp_path, marker):
    checkpoint = tmp_path / "dp"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(_tiny_model_session.phrase_encoder.config.to_json_string())
    (checkpoint / "pytorch_model.bin").write_bytes(b"never read")
    planted = _plant_auto_map(checkpoint, "config.json")
    with pytest.raises(RemoteCodeError, match=re.escape(str(planted))):
        PhraseModel.from_densephrases(checkpoint)
    planted.write_text(_tiny_model_session.phrase_encoder.config.to_json_string())
    tokenizer = tmp_path / "tok"
    _tiny_model_session.tokenizer.save_pretrained(str(tokenizer))
    planted = _plant_auto_map(tokenizer, "tokenizer_config.json")
    with pytest.raises(RemoteCodeError, match=re.escape(str(planted))):
        PhraseModel.from_densephrases(checkpoint, tokenizer=tokenizer)


def test_unreadable_loader_file_is_a_model_load_error(model_copy, marker):
    (model_copy / "tokenizer_config.json").write_text("[1, 2")
    with pytest.raises(ModelLoadError, match="tokenizer_config.json"):
        PhraseModel.load(model_copy)


def test_cli_index_model_with_auto_map_exits_with_a_message(model_copy, corpus_file, tmp_path, marker, capsys):
    planted = _plant_auto_map(model_copy, "tokenizer_config.json")
    code = dphr(["index", "--model", str(model_copy), "--corpus", str(corpus_file), "--out", str(tmp_path / "idx")])
    err = capsys.readouterr().err
    assert code == 2
    assert str(planted) in err and "auto_map" in err and "Traceback" not in err


def test_index_manifest_model_path_with_auto_map_is_refused(model_copy, corpus_file, tmp_path, monkeypatch, capsys):
    """The index records the model it was built with; a directory changed afterwards to ask for code is refused
    when ``dphr search`` (or ``open_searcher``) loads it from the manifest."""
    from dphr_haystack.saved_index import open_searcher

    index_dir = tmp_path / "idx"
    args = ["index", "--model", str(model_copy), "--corpus", str(corpus_file), "--out", str(index_dir)]
    assert dphr([*args, "--no-progress", "--device", "cpu"]) == 0
    manifest = json.loads((index_dir / "manifest.json").read_text())
    assert Path(manifest["model_path"]) == model_copy.resolve()
    planted = _plant_auto_map(model_copy, "tokenizer_config.json")
    capsys.readouterr()
    marker = tmp_path / "pwned"
    monkeypatch.setenv("DPHR_PWNED", str(marker))
    monkeypatch.setattr("builtins.input", lambda *a, **k: pytest.fail("a prompt was shown"))
    assert dphr(["search", "--index", str(index_dir), "who wrote hamlet"]) == 2
    err = capsys.readouterr().err
    assert str(planted) in err and "Traceback" not in err
    with pytest.raises(RemoteCodeError, match=re.escape(str(planted))):
        open_searcher(index_dir)
    assert not marker.exists()


def test_haystack_nodes_refuse_auto_map(model_copy, tiny_base_dir, tmp_path, marker):
    pytest.importorskip("haystack")
    from dphr_haystack.nodes import MiniLMEmbeddingRetriever, load_phrase_model

    planted = _plant_auto_map(model_copy, "tokenizer_config.json")
    with pytest.raises(RemoteCodeError, match=re.escape(str(planted))):
        load_phrase_model(str(model_copy), device="cpu")
    base = Path(shutil.copytree(tiny_base_dir, tmp_path / "st"))
    planted = _plant_auto_map(base, "config.json")
    with pytest.raises(RemoteCodeError, match=re.escape(str(planted))):
        MiniLMEmbeddingRetriever(embedding_model=str(base))


def test_teacher_with_auto_map_is_refused(tiny_base_dir, tmp_path, marker):
    pytest.importorskip("train.teacher")
    from train.teacher import load_qa_model

    teacher = Path(shutil.copytree(tiny_base_dir, tmp_path / "teacher"))
    planted = _plant_auto_map(teacher, "config.json")
    with pytest.raises(RemoteCodeError, match=re.escape(str(planted))):
        load_qa_model(teacher)


def test_every_transformers_loader_call_passes_trust_remote_code_false():
    """Each ``from_pretrained``/``from_config`` of transformers in the package and the training recipes says
    ``trust_remote_code=TRUST_REMOTE_CODE`` (False) explicitly, so no call ever falls back to asking."""
    problems = []
    call = re.compile(r"\b(Auto\w+)\.(from_pretrained|from_config)\(")
    for folder in ("dphr_haystack", "train"):
        for file in sorted((REPO / folder).rglob("*.py")):
            text = file.read_text(encoding="utf-8")
            for match in call.finditer(text):
                depth, end = 1, match.end()
                while depth and end < len(text):
                    depth += {"(": 1, ")": -1}.get(text[end], 0)
                    end += 1
                if "trust_remote_code=TRUST_REMOTE_CODE" not in text[match.start() : end]:
                    problems.append(f"{file.relative_to(REPO)}: {match.group(0)}")
    assert problems == []
    from dphr_haystack.model.remote_code import TRUST_REMOTE_CODE

    assert TRUST_REMOTE_CODE is False
