"""Typed errors. Every failure the library raises on bad input derives from :class:`DphrError`."""

from __future__ import annotations


class DphrError(Exception):
    """Base class of every error dphr_haystack raises on purpose."""


class InvalidQueryError(DphrError, ValueError):
    """A query is empty, whitespace only, or otherwise unusable."""


class EmptyCorpusError(DphrError, ValueError):
    """A corpus held no passage with text."""


class CorpusFormatError(DphrError, ValueError):
    """A corpus file could not be read in any supported format."""


class InvalidParameterError(DphrError, ValueError):
    """A parameter has a value outside its documented range or set of choices."""


class ModelLoadError(DphrError, OSError):
    """A model directory or checkpoint is missing, incomplete or refused (e.g. a pickle)."""


class QueryOnlyCheckpointError(ModelLoadError):
    """A checkpoint holds only a query side (DensePhrases v1.1 query-side fine-tuning) and no phrase side was given."""


class IndexLoadError(DphrError, OSError):
    """An index directory is missing, corrupted, or from another format version."""


class ModelMismatchError(DphrError, ValueError):
    """An index was built with a different phrase encoder than the one given."""


class DistributedDumpError(DphrError, RuntimeError):
    """A distributed dump worker failed after its retries (complete shards are kept: re-run to resume)."""


class DirectoryLockedError(DphrError, RuntimeError):
    """Another writer holds an index or store directory and did not let go within the lock timeout."""


class RemoteCodeError(ModelLoadError):
    """A model directory asks to run code shipped with it (``auto_map``); dphr_haystack never runs such code."""


class UnsafeYamlError(DphrError, ValueError):
    """A YAML file uses anchors and aliases (which can expand to an enormous document) or is otherwise refused."""


class UnsafePathError(DphrError, OSError):
    """A file this library was about to write is a symbolic link (or not a regular file): refused, never followed."""


class SettingsConflictError(DphrError, ValueError):
    """A resumed index or dump was asked for settings other than the ones it was built with."""


class NotTextError(CorpusFormatError):
    """A file given as text is not text (binary, or bytes of no supported encoding): refused, nothing indexed
    (REST: 415)."""


class UnsupportedFilterError(InvalidParameterError):
    """A metadata filter uses an operator or a shape the store does not implement: refused, never ignored."""


class InvalidDocumentError(InvalidParameterError):
    """A document holds a value a store cannot serve back as JSON (NaN, infinity, a lone surrogate): refused before
    anything of its write is stored."""


class IndexWriteError(DphrError, OSError):
    """Writing a phrase index failed (the disk is full, an I/O error): the index keeps its last committed state, in
    memory and on disk, and the next write can succeed. ``errno`` is the failed call's."""


class ReadOnlyStoreError(DphrError, PermissionError):
    """A store directory cannot be written (a read-only mount, a directory without write permission): it can be read,
    and every write is refused with this error before anything changes."""


class InputTooLargeError(InvalidParameterError):
    """An input is over a size bound the server or caller set (a request body, an uploaded file, one passage)."""
