"""``python -m dphr_haystack`` = the ``dphr`` command."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
