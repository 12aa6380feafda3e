"""Data shipped inside the package: a small real corpus with questions, named so that readers accept the name.

``squad-dev`` is SQuAD v1.1 dev (public part: 40 Wikipedia articles, 1,702 paragraphs, 8,763 questions, CC BY-SA
4.0; see ``shipped_datasets/squad-dev/README.md``). Wherever a corpus or question file is read, the name works in
place of a path, and the file's sha256 is checked first:

    >>> from dphr_haystack.corpus import read_corpus
    >>> from dphr_haystack.evaluation import read_questions
    >>> passages = list(read_corpus("squad-dev"))            # ids title-article-paragraph, e.g. Super_Bowl_50-0-0
    >>> questions = read_questions("squad-dev", limit=200, seed=0)  # gold_passage_id uses the same ids
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .errors import CorpusFormatError

SHIPPED_DATASETS_DIR = Path(__file__).resolve().parent / "shipped_datasets"


@dataclass(frozen=True)
class ShippedDataset:
    """A data file shipped with the package, with what it holds and where it comes from."""

    name: str
    file_name: str
    sha256: str
    size: int
    articles: int
    passages: int
    questions: int
    licence: str
    citation: str

    @property
    def folder(self) -> Path:
        """The dataset's folder (the file, its README.md and LICENSE)."""
        return SHIPPED_DATASETS_DIR / self.name

    @property
    def path(self) -> Path:
        """The data file, after checking its size and sha256.

        Raises:
            CorpusFormatError: The file is missing (an installation without package data) or not the shipped one.
        """
        path = self.folder / self.file_name
        if not path.is_file():
            raise CorpusFormatError(
                f"shipped dataset {self.name!r} is missing from this installation ({path}); reinstall dphr-haystack"
            )
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if len(data) != self.size or digest != self.sha256:
            raise CorpusFormatError(
                f"shipped dataset {self.name!r} at {path} is damaged: {len(data)} bytes with sha256 {digest}, "
                f"expected {self.size} bytes with sha256 {self.sha256}; reinstall dphr-haystack"
            )
        return path


SQUAD_DEV = ShippedDataset(
    name="squad-dev",
    file_name="dev-v1.1-public.json.gz",
    sha256="a8d72be336ebc02b188ea5c2956408a5eacadf979e7983269ba247fb327eaa68",
    size=864_704,
    articles=40,
    passages=1_702,
    questions=8_763,
    licence="CC BY-SA 4.0 (passages from Wikipedia)",
    citation=(
        "Rajpurkar, Zhang, Lopyrev and Liang, SQuAD: 100,000+ Questions for Machine Comprehension of Text, "
        "EMNLP 2016 (SQuAD v1.1 dev, 40 of its 48 articles)"
    ),
)
SHIPPED_DATASETS = {SQUAD_DEV.name: SQUAD_DEV}


def shipped_dataset_names() -> list[str]:
    """The names that readers accept in place of a corpus or question file."""
    return sorted(SHIPPED_DATASETS)


def shipped_dataset(name: str) -> ShippedDataset:
    """The shipped dataset called ``name``.

    Raises:
        CorpusFormatError: No dataset of that name ships with the package.
    """
    try:
        return SHIPPED_DATASETS[name]
    except KeyError:
        raise CorpusFormatError(
            f"no shipped dataset {name!r} (shipped: {', '.join(shipped_dataset_names())})"
        ) from None


def resolve_data_file(source: str | Path) -> Path:
    """``source`` as a path: itself when that file or folder exists, else the checked file of the shipped dataset of
    that name (e.g. ``squad-dev``), else unchanged (the caller reports it missing).

    Raises:
        CorpusFormatError: ``source`` names a shipped dataset whose file is missing or damaged.
    """
    path = Path(source)
    if path.exists() or str(source) not in SHIPPED_DATASETS:
        return path
    return SHIPPED_DATASETS[str(source)].path


__all__ = [
    "SHIPPED_DATASETS",
    "SHIPPED_DATASETS_DIR",
    "SQUAD_DEV",
    "ShippedDataset",
    "resolve_data_file",
    "shipped_dataset",
    "shipped_dataset_names",
]
