"""The phrase model's tokenizer: fast tokenizers only, their casing, and saving one beside a model."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from .._util.lazy import require
from .._util.nofollow import make_temp_dir, refuse_symlink
from ..errors import ModelLoadError
from .remote_code import TRUST_REMOTE_CODE

# Files a tokenizer can be built from; a directory holding none of them has no tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")


def has_tokenizer_files(directory: Path) -> bool:
    """True when ``directory`` holds a vocabulary a tokenizer can be built from."""
    return any((directory / name).is_file() for name in TOKENIZER_FILES)


def load_tokenizer(directory: Path) -> Any:
    """The fast tokenizer saved in ``directory``, as transformers' ``AutoTokenizer`` loads it with ``use_fast=True``:
    the fast class its ``tokenizer_config.json`` names (``BertTokenizer`` → ``BertTokenizerFast``),
    without importing ``AutoTokenizer``, which imports transformers' model and text-generation code (seconds on
    a busy machine). A directory that names no such class is loaded by ``AutoTokenizer``."""
    transformers = require("transformers")
    try:
        named = json.loads((directory / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        named = None
    if isinstance(named, str) and named.isidentifier():
        fast = getattr(transformers, named if named.endswith("Fast") else f"{named}Fast", None)
        if isinstance(fast, type) and issubclass(fast, transformers.PreTrainedTokenizerFast):
            return fast.from_pretrained(str(directory))
    return transformers.AutoTokenizer.from_pretrained(
        str(directory), use_fast=True, trust_remote_code=TRUST_REMOTE_CODE
    )


def check_fast_tokenizer(tokenizer: Any, source: Any) -> None:
    """Raise ModelLoadError unless ``tokenizer`` is a fast (Rust) tokenizer: character offsets need one."""
    if not getattr(tokenizer, "is_fast", False):
        raise ModelLoadError(f"{source}: a fast (Rust) tokenizer is required for character offsets")


def save_tokenizer(tokenizer: Any, path: Path) -> None:
    """``tokenizer.save_pretrained`` into a fresh directory, then each file renamed into ``path`` (transformers
    opens files by name, which would follow a symbolic link; a rename replaces a path, and links are refused)."""
    staging = make_temp_dir(path / "tokenizer")
    try:
        tokenizer.save_pretrained(str(staging))
        for file in sorted(staging.iterdir()):
            os.replace(file, refuse_symlink(path / file.name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def apply_casing(tokenizer: Any, do_lower_case: bool, source: Any = "tokenizer") -> None:
    """Make a fast tokenizer lower-case its input or keep case, and check that it does.

    A BERT tokenizer folder without ``tokenizer_config.json`` (SpanBERT's: ``vocab.txt`` + ``config.json``)
    lower-cases by default; DensePhrases loads it with ``do_lower_case=False``. The setting is written into the
    tokenizer's normalizer and its saved settings, so a saved model reloads with the same casing.

    Raises:
        ModelLoadError: The tokenizer's normalizer cannot be set to that casing.
    """
    backend = tokenizer.backend_tokenizer
    if lowercases(backend) != do_lower_case:
        state = json.loads(backend.normalizer.__getstate__()) if backend.normalizer is not None else {}
        if state.get("type") != "BertNormalizer":
            raise ModelLoadError(
                f"{source}: cannot set do_lower_case={do_lower_case} on a {state.get('type')} normalizer"
            )
        from tokenizers.normalizers import BertNormalizer

        state.pop("type")
        state["lowercase"] = do_lower_case
        backend.normalizer = BertNormalizer(**state)
    if hasattr(tokenizer, "do_lower_case"):
        tokenizer.do_lower_case = do_lower_case
    tokenizer.init_kwargs["do_lower_case"] = do_lower_case
    if lowercases(backend) != do_lower_case:
        raise ModelLoadError(f"{source}: the tokenizer ignores do_lower_case={do_lower_case}")


def lowercases(backend: Any) -> bool:
    """True when a backend (Rust) tokenizer's normalizer lower-cases its input."""
    return backend.normalizer is not None and backend.normalizer.normalize_str("Ab") == "ab"
