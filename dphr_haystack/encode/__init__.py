"""From passages to phrase vectors: the sharded phrase dump, its distributed (Ray) variant, and encoding passages
straight into a phrase index (``add.add_passages``).

Import from the modules (``dphr_haystack.encode.dump``, ...) or from the top-level ``dphr_haystack``.
"""
