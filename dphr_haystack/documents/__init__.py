"""The Haystack-free document layer both Haystack front ends adapt: documents as phrase-index passages, the phrase
index of a collection of documents, phrase search options and hit → document / answer values."""

from __future__ import annotations
