"""The phrase encoder: config, model, tokenizer, passage encoding, fingerprint, weights on disk, inputs and loading.

Import from the modules (``dphr_haystack.model.phrase_model``, ``dphr_haystack.model.loading``, ...) or from the
top-level ``dphr_haystack``.
"""
