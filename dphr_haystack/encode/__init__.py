"""From corpus to phrase dump: corpus readers, the sharded phrase dump and its distributed (Ray) variant.

Import from the modules (``dphr_haystack.encode.dump``, ...) or from the top-level ``dphr_haystack``.
"""
