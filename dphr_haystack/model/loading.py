"""Model reference → loaded phrase model: the one loader the CLI, the searcher and the Haystack nodes call."""

from __future__ import annotations

from pathlib import Path

from .._util.threads import resolve_threads, using_threads
from .phrase_model import PhraseModel
from .sources import model_source


def load_model(model: str | Path) -> PhraseModel:
    """Load a phrase model from any reference, to search or index with: what the CLI, the searcher and the Haystack
    nodes accept.

    ``model`` is a shipped model (``dphr-minilm-squad-distilled``, alias ``default``; ``dphr-minilm-squad-384``,
    ``dphr-minilm-squad``), ``minilm`` (an UNTRAINED phrase model on the offline all-MiniLM-L6-v2), a directory
    written by :meth:`PhraseModel.save`, a DensePhrases checkpoint directory, a plain BERT-family encoder directory
    (an untrained phrase model is built on it), or a hub name ``org/name``. A local directory wins over a shipped name
    (:func:`~dphr_haystack.model.sources.model_source`).

    Raises:
        ModelLoadError: The path does not exist (the message names it) or the model cannot be read.
    """
    # Loading is small-tensor work (decoding weights, a test forward pass): on one thread, like a query, it does not
    # stall on a busy machine (dphr_haystack._util.threads; DPHR_THREADS or an enclosing block may say otherwise).
    # Plain BERT encoders are computed by dphr_haystack.model.bert: the same outputs, bit for bit, without the
    # seconds that importing transformers' modeling code costs (PhraseModel.load keeps transformers' classes).
    with using_threads(resolve_threads(None, "query")):
        return PhraseModel.from_source(model_source(model), encoders="dphr")
