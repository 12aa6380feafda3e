"""Where inline markup lies in a passage: code spans (with reST roles and link ends), emphasis, markdown links and
inline HTML, paragraph by paragraph (:func:`markup_pairs`). :mod:`dphr_haystack.spans` trims answers by it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class MarkupPair:
    """One piece of inline markup of a text: its opening mark ``text[open_start:open_end]``, its content
    ``text[open_end:close_start]`` and its closing mark ``text[close_start:close_end]``. ``code`` for a code span
    (its content is literal); ``role`` is the length of a reST role that opens it (``:func:``), part of the opening
    mark, as a leading ``~`` or ``!`` and a closing ``_`` or `` <target>`` of reST are."""

    open_start: int
    open_end: int
    close_start: int
    close_end: int
    code: bool = False
    role: int = 0


_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_MARKS = re.compile(r"[`*_\[<]")
_BACKTICKS = re.compile(r"`+")
_ROLE_BEFORE = re.compile(r"(?<![\w:`]):[A-Za-z][\w.+-]*(?::[A-Za-z][\w.+-]*)?:\Z")
_LINK_END = re.compile(r"__?(?![\w])")
_RST_TARGET = re.compile(r"\S(\s+<[^<>`]+>)\Z")
_DELIMITER_RUN = re.compile(r"\*+|_+")
_DOCTEST_LINE = re.compile(r"^[ \t]*(?:>>>|\.\.\.)(?: |$).*$", re.M)
_MARKDOWN_LINK = re.compile(r"!?\[[^\[\]\n]*[^\[\]\s][^\[\]\n]*\]\(([^()\s]*(?:\s+\"[^\"\n]*\")?)\)")
_HTML_OPEN = re.compile(r"<(a|abbr|b|code|em|i|kbd|samp|small|span|strong|tt|u)\b[^<>]*>", re.I)


@lru_cache(maxsize=1024)
def markup_pairs(text: str) -> tuple[MarkupPair, ...]:
    """The inline markup of ``text``, paragraph by paragraph (markup never spans a blank line), in order of the
    opening marks: code spans (backtick runs of equal length, left to right, as markdown and reST pair them; a
    reST role and link end included), emphasis (``*``, ``**``, ``_``, ``__`` runs that open and close as in
    CommonMark, outside code spans and doctest lines), markdown links and images (``[text](url)``) and inline
    HTML elements (``<code>...</code>``, ``<strong>``, ``<a ...>``...)."""
    pairs: list[MarkupPair] = []
    start = 0
    for brk in [*_PARAGRAPH_BREAK.finditer(text), None]:
        stop = brk.start() if brk is not None else len(text)
        if _MARKS.search(text, start, stop):
            pairs.extend(_paragraph_pairs(text, start, stop))
        start = brk.end() if brk is not None else stop
    return tuple(sorted(pairs, key=lambda p: (p.open_start, -p.close_end)))


def _paragraph_pairs(text: str, lo: int, hi: int) -> list[MarkupPair]:
    code = _code_spans(text, lo, hi)
    literal = [(p.open_start, p.close_end) for p in code]

    def in_code(i: int) -> bool:
        return any(a <= i < b for a, b in literal)

    pairs = list(code)
    pairs += _emphasis(text, lo, hi, in_code)
    for m in _MARKDOWN_LINK.finditer(text, lo, hi):
        if not in_code(m.start()):
            opener = 2 if text[m.start()] == "!" else 1
            pairs.append(MarkupPair(m.start(), m.start() + opener, m.start(1) - 2, m.end()))
    for m in _HTML_OPEN.finditer(text, lo, hi):
        if in_code(m.start()):
            continue
        close = re.compile(rf"</{m.group(1)}\s*>", re.I).search(text, m.end(), hi)
        if close is not None:
            pairs.append(MarkupPair(m.start(), m.end(), close.start(), close.end()))
    return pairs


def _code_spans(text: str, lo: int, hi: int) -> list[MarkupPair]:
    """Backtick runs of ``text[lo:hi]`` paired into code spans, with a reST role before one (``:func:``), a
    leading ``~`` / ``!`` of the role's target, a link end after one (`` `text`_ ``) and a reST explicit target
    (`` `title <target>`_ ``) counted as marks."""
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(text, lo, hi)]
    out, i = [], 0
    while i < len(runs):
        width = runs[i][1] - runs[i][0]
        j = next((j for j in range(i + 1, len(runs)) if runs[j][1] - runs[j][0] == width), None)
        if j is None:
            i += 1
            continue
        (o_start, o_end), (c_start, c_end) = runs[i], runs[j]
        role = 0
        if width == 1:
            found = _ROLE_BEFORE.search(text, lo, o_start)
            if found is not None:
                role = o_start - found.start()
            link = _LINK_END.match(text, c_end, hi)
            if link is not None:
                c_end = link.end()
            if role or link is not None:
                if role and text[o_end : o_end + 1] in ("~", "!") and o_end + 1 < c_start:
                    o_end += 1
                target = _RST_TARGET.search(text, o_end, c_start)
                if target is not None:
                    c_start = target.start(1)
        out.append(MarkupPair(o_start - role, o_end, c_start, c_end, code=True, role=role))
        i = j + 1
    return out


def _emphasis(text: str, lo: int, hi: int, in_code: Callable[[int], bool]) -> list[MarkupPair]:
    """``*`` / ``_`` delimiter runs of ``text[lo:hi]`` paired as CommonMark pairs emphasis: a run that can close
    closes the nearest open run of the same character and length; runs inside code spans or on doctest lines
    (``>>>``, ``...``) take no part."""
    doctest = [(m.start(), m.end()) for m in _DOCTEST_LINE.finditer(text, lo, hi)]
    openers: list[tuple[int, int]] = []
    out = []
    for m in _DELIMITER_RUN.finditer(text, lo, hi):
        a, b = m.start(), m.end()
        if in_code(a) or any(x <= a < y for x, y in doctest):
            continue
        before = text[a - 1] if a > lo else " "
        after = text[b] if b < hi else " "
        left = not after.isspace() and (not _punctuation(after) or before.isspace() or _punctuation(before))
        right = not before.isspace() and (not _punctuation(before) or after.isspace() or _punctuation(after))
        if text[a] == "_":
            can_open = left and (not right or _punctuation(before))
            can_close = right and (not left or _punctuation(after))
        else:
            can_open, can_close = left, right
        if can_close:
            k = next(
                (
                    k
                    for k in range(len(openers) - 1, -1, -1)
                    if text[openers[k][0]] == text[a] and openers[k][1] - openers[k][0] == b - a
                ),
                None,
            )
            if k is not None and not is_dunder(text[openers[k][0] : b]):
                o_start, o_end = openers[k]
                del openers[k:]
                out.append(MarkupPair(o_start, o_end, a, b))
                continue
        if can_open:
            openers.append((a, b))
    return out


DIRECTIVE_NAME = re.compile(r"[\w-]+(?::[\w-]+)?::(?=\s)")
_DUNDER = re.compile(r"__[A-Za-z0-9]\w*__")


def is_dunder(text: str) -> bool:
    """Is ``text`` a special name (``__init__``), whose underscores are no emphasis?"""
    return _DUNDER.fullmatch(text) is not None


def _punctuation(ch: str) -> bool:
    return not ch.isalnum() and not ch.isspace()


__all__ = ["DIRECTIVE_NAME", "MarkupPair", "is_dunder", "markup_pairs"]
