"""Haystack 1.x nodes (written in the Haystack issue)."""

from __future__ import annotations

__all__: list[str] = []
