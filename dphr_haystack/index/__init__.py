"""The phrase index: vector codec, on-disk storage, passage table, FAISS structures and their lifecycle, search
backends, merging a dump, and the :class:`~dphr_haystack.index.phrase_index.PhraseIndex` that puts them together.

Import from the modules (``dphr_haystack.index.phrase_index``, ...) or from the top-level ``dphr_haystack``.
"""
