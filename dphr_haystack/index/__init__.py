"""The phrase index: vector codec, FAISS structures, search backends and the on-disk :class:`PhraseIndex`.

Import from the modules (``dphr_haystack.index.phrase_index``, ...) or from the top-level ``dphr_haystack``.
"""
