"""Hostile values where a component or a model directory is deserialised: each ends in a typed DphrError.

* A model directory whose ``dphr_config.json`` is nested too deeply for the JSON reader.
* A FAISS index file whose header, mutated byte by byte, declares impossible sizes.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from dphr_haystack.errors import IndexLoadError, ModelLoadError

pytestmark = pytest.mark.unit


# ----------------------------------------------------------------- a model directory with a deeply nested config
@pytest.mark.parametrize("file", ["dphr_config.json", "config.json"])
def test_a_deeply_nested_model_config_is_a_model_load_error(tmp_path, model_dir, file):
    from dphr_haystack.model.loading import load_model

    folder = tmp_path / "model"
    shutil.copytree(model_dir, folder)
    (folder / file).write_text('{"a": ' * 200_000 + "1" + "}" * 200_000)
    with pytest.raises(ModelLoadError):
        load_model(str(folder))


# ----------------------------------------------------------------- FAISS index files declaring impossible sizes
@pytest.fixture(scope="module")
def ivf_index(tmp_path_factory, _tiny_model_session) -> Path:
    """An on-disk index with a trained FAISS structure (a written faiss-N.index file)."""
    from dphr_haystack.encode.add import add_passages
    from dphr_haystack.index.phrase_index import PhraseIndex
    from tests.conftest import tiny_passages

    path = tmp_path_factory.mktemp("hostile-faiss") / "index"
    index = PhraseIndex.create(_tiny_model_session, path=path, faiss_factory="IVF2,Flat")
    add_passages(index, _tiny_model_session, tiny_passages(), progress=False)
    assert json.loads((path / "manifest.json").read_text()).get("faiss_file")
    return path


# The 8-byte counts after the inverted lists' tag ``ilar``: nlist, code size, the length of the list sizes, the
# first two list sizes (offsets from the tag).
_ILAR_FIELDS = {"nlist": 4, "code_size": 12, "sizes_length": 24, "size_0": 32, "size_1": 40}


def _size_field_mutations(data: bytes) -> list[tuple[str, int, bytes]]:
    """Each count of the inverted lists' header replaced by a huge one (2^36, 2^44, 2^62)."""
    start = data.find(b"ilar")
    assert start > 0, "no inverted lists header in the FAISS file"
    return [
        (f"{field}=2^{power}", start + offset, struct.pack("<q", 2**power))
        for field, offset in _ILAR_FIELDS.items()
        for power in (36, 44, 62)
    ]


def test_faiss_files_declaring_huge_sizes_are_index_load_errors(ivf_index, tmp_path):
    from dphr_haystack.index.phrase_index import PhraseIndex

    name = json.loads((ivf_index / "manifest.json").read_text())["faiss_file"]
    clean = (ivf_index / name).read_bytes()
    folder = tmp_path / "mutated"
    shutil.copytree(ivf_index, folder)
    untyped: list[str] = []
    for label, offset, patch in _size_field_mutations(clean):
        data = bytearray(clean)
        data[offset : offset + len(patch)] = patch[: len(data) - offset]
        (folder / name).write_bytes(bytes(data))
        try:
            PhraseIndex.load(folder)
        except IndexLoadError:
            pass
        except Exception as exc:  # noqa: BLE001  (the point: any untyped error is a finding)
            untyped.append(f"{label}: {type(exc).__name__}: {exc}"[:160])
    assert not untyped, "\n".join(untyped)
