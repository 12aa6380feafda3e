"""The phrase encoder: config, model, weights on disk, tokenized inputs, and the registry of names and devices.

Import from the modules (``dphr_haystack.model.phrase_model``, ...) or from the top-level ``dphr_haystack``.
"""
