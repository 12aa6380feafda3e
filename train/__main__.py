"""Entry point: ``python -m train <stage> --config <yaml>`` (see :mod:`train.cli`)."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
