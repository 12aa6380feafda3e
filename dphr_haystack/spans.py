"""Answer spans a user reads: markup and unpaired punctuation trimmed from a phrase's edges, duplicates folded.

A phrase is a span of subword tokens, so on markdown, reStructuredText or other punctuated text its edges often
carry what is no part of the answer: code and emphasis markup (`` ` ``, ``*``, ``_``, ``#``), a reST role
(``:func:``) or directive name (``cmdoption::``), a quote or bracket whose partner lies outside the span, a
trailing ``,`` ``;`` ``:`` or full stop. :func:`trim_span` moves a span's edges inward past them
(``passage[start:end]`` is still the text) and keeps what is balanced within the span: ``(1889)``, ``"Hamlet"``,
``Washington (state)``, ``U.S.``, ``3.14``. A call's parentheses stay (``sys.exit()``): they are balanced, say
that the name is called, and SQuAD normalisation reads ``join()`` as ``join``.

Markup is read from the passage, not only from the span: the code spans (with their reST role or link end), the
emphasis pairs, markdown links and inline HTML elements of each paragraph (:func:`markup_pairs`). A span that
crosses one of them, its opening mark inside and its closing mark outside (``The **MetaFieldRanker``,
``Set `HETZNER_API_KEY``) or the other way round, keeps the marked-up side (``MetaFieldRanker``,
``HETZNER_API_KEY``); a span that is exactly one of them loses the marks (`` `top_k` ``, ``:func:`open` ``,
``[the guide](setup.md)``, ``<code>httpx</code>``), and what is inside a code span is literal: nothing more is
trimmed. Words are never dropped for their own sake: in ``a `HETZNER_API_KEY` `` the markup is balanced, and the
article is the ranker's choice of span.

:func:`word_boundaries` tells search where a phrase may start and end (:func:`inside_word`): never inside a word,
an identifier, a dotted name or number or an option (``HETZNER_API_KEY``, ``os.path.join``, ``3.11.2``,
``--no-cache-dir`` and, in code spans, ``farm-haystack`` are whole), nor inside a reST role, a directive marker,
a link's URL or an HTML tag.

:class:`AnswerFolder` folds duplicates the way extractive readers do: an answer whose SQuAD-normalised text
equals that of a better one, or whose span overlaps a better one's in the same passage, is folded into it
(``100``, `` `100` `` and ``100` by default`` are one answer).

Example:
    >>> text = "Set `HETZNER_API_KEY`, then run it."
    >>> start, end = trim_span(text, 4, 22)   # the phrase "`HETZNER_API_KEY`,"
    >>> text[start:end]
    'HETZNER_API_KEY'
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from .answers import normalize_answer
from .markup import DIRECTIVE_NAME, MarkupPair, is_dunder, markup_pairs

# Characters dropped from an edge wherever they are (outside a code span).
_LEADING_ALWAYS = frozenset(",;:|…—–")
_TRAILING_ALWAYS = frozenset(",;:|…—–")
# Emphasis markup: runs of these are dropped from an edge (``_`` only in pairs or detached: see _underscores).
_EMPHASIS = frozenset("*~")
# Brackets and directional quotes: an edge one is kept only when its partner is within the span.
_OPENERS = {"(": ")", "[": "]", "{": "}", "“": "”", "‘": "’", "«": "»"}
_CLOSERS = {close: open_ for open_, close in _OPENERS.items()}
# Straight quotes have no direction: an edge one is kept when the span holds an even number of them.
_STRAIGHT_QUOTES = frozenset("\"'")
# A full stop that ends one of these words ends an abbreviation, not a sentence.
_ABBREVIATIONS = frozenset(
    "inc ltd co corp jr sr st dr mr mrs ms prof etc vs mt ft approx dept univ gen gov sen rep lt col capt sgt rev "
    "bros".split()
)
_DOTTED = re.compile(r"^(?:[A-Za-z]{1,3}\.){2,}$")  # U.S., e.g., i.e., Ph.D., a.m.
_INITIAL = re.compile(r"^[A-Z]\.$")  # J.
# Words that, around one markup element of a span, only say what kind of thing the element is: the element answers.
DESCRIBING_WORDS = frozenset(
    "a an the this that its class function method module package argument parameter option flag attribute object "
    "variable constant field key value type command setting property exception decorator keyword".split()
)


def trim_span(text: str, start: int, end: int) -> tuple[int, int]:
    """``(start, end)`` moved inward past markup and unpaired punctuation at the edges of ``text[start:end]``
    (:func:`answer_span`); unchanged when trimming would leave nothing with a letter or digit in it."""
    return answer_span(text, start, end) or (start, end)


def answer_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    """``(start, end)`` moved inward past markup and unpaired punctuation at the edges of ``text[start:end]``, or
    None when nothing with a letter or digit is left: a span of markup and punctuation only (`` :file:`/ ``), which
    answers nothing.

    The result always lies within the span and ``text[new_start:new_end]`` is the trimmed answer. Markup the span
    crosses (an opening mark inside it, the closing one outside, or the other way round: :func:`markup_pairs`) is
    left with the side it marks up.

    Raises:
        ValueError: The span does not lie within ``text``.
    """
    if not 0 <= start <= end <= len(text):
        raise ValueError(f"span ({start}, {end}) outside a text of {len(text)} characters")
    pairs = [p for p in markup_pairs(text) if p.open_start < end and p.close_end > start]  # those it touches
    s, e = start, end
    while True:
        s, e = _strip_space(text, s, e)
        if s >= e:
            return None
        if pairs:
            s, e = _strip_space(text, *_uncross(text, s, e, pairs))
            if s >= e:  # the span lies within a mark
                return None
            whole = next((p for p in pairs if s in (p.open_start, p.open_start + p.role) and p.close_end == e), None)
            if whole is not None:  # exactly one code span, emphasis, link or element: its marks go
                s, e = whole.open_end, whole.close_start
                if whole.code:
                    break  # what is inside a code span is literal
                continue
            role = next((p for p in pairs if p.open_start == s and p.role), None)
            if role is not None:  # a reST role before a code span that does not end the span
                s += role.role
                continue
        new_s, new_e, literal = _trim_once(text, s, e, pairs)
        if (new_s, new_e) == (s, e):
            break
        s, e = new_s, new_e
        if literal:
            break
    s, e = _described_element(text, *_strip_space(text, s, e), pairs)
    if not any(ch.isalnum() for ch in text[s:e]):
        return None
    return s, e


def _described_element(text: str, s: int, e: int, pairs: Sequence[MarkupPair]) -> tuple[int, int]:
    """The content of the one markup element of ``text[s:e]`` when the words around it only say what kind of thing
    it is (:data:`DESCRIBING_WORDS`: "the :class:`Queue` class", "a *dir* argument", "the `log_locals`"): the
    element is what answers; else ``(s, e)``."""
    inside = [p for p in pairs if s <= p.open_start and p.close_end <= e]
    if len(inside) != 1:
        return s, e
    element = inside[0]
    around = f"{text[s : element.open_start]} {text[element.close_end : e]}".split()
    if not around or any(word.lower().strip(".,;:()") not in DESCRIBING_WORDS for word in around):
        return s, e
    if not any(ch.isalnum() for ch in text[element.open_end : element.close_start]):
        return s, e
    return element.open_end, element.close_start


def _strip_space(text: str, s: int, e: int) -> tuple[int, int]:
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e


def _uncross(text: str, s: int, e: int, pairs: Sequence[MarkupPair]) -> tuple[int, int]:
    """``text[s:e]`` with its edges moved out of any mark they fall inside, and then, as long as it crosses a
    markup pair, cut at the pair's mark inside it: the marked-up side is kept (the other side when that one holds
    no letter or digit; a crossing neither side of which has one is left)."""
    for p in pairs:
        if p.open_start < s < p.open_end:  # in a role the edge moves to the code span after it
            s = p.open_start + p.role if s <= p.open_start + p.role else p.open_end
        elif p.close_start < s < p.close_end:
            s = p.close_end
        if p.open_start < e < p.open_end:
            e = p.open_start
        elif p.close_start < e < p.close_end:
            e = p.close_start
    if s >= e:
        return s, s
    for _ in range(len(pairs)):
        cut = None
        for p in pairs:
            if p.open_end <= s and s <= p.close_start and p.close_end <= e:  # opened before the span, closed in it
                cut = _side(text, (s, p.close_start), (p.close_end, e))
            elif s <= p.open_start and p.open_end <= e and e <= p.close_start:  # opened in the span, closed after
                cut = _side(text, (p.open_end, e), (s, p.open_start))
            if cut is not None:
                break
        if cut is None:
            break
        s, e = cut
    return s, e


def _side(text: str, inner: tuple[int, int], outer: tuple[int, int]) -> tuple[int, int] | None:
    """The inner side of a crossed markup pair when it holds a letter or digit, else the outer one, else None."""
    for s, e in (inner, outer):
        if s < e and any(ch.isalnum() for ch in text[s:e]):
            return s, e
    return None


def _trim_once(text: str, s: int, e: int, pairs: Sequence[MarkupPair] = ()) -> tuple[int, int, bool]:
    """One step of trimming ``text[s:e]``: the span with one edge character (or run) dropped, or unchanged when
    nothing is to be dropped; True when what is left is the inside of a code span (literal: trimming stops). An
    emphasis mark at an edge stays when its partner (``pairs``) is inside the span."""
    span = text[s:e]
    opens = bool(pairs) and any(p.open_start == s and p.close_end <= e for p in pairs)
    closes = bool(pairs) and any(p.close_end == e and p.open_start >= s for p in pairs)
    first, last = span[0], span[-1]
    if first in _LEADING_ALWAYS:
        return s + 1, e, False
    if last in _TRAILING_ALWAYS:
        return s, e - 1, False
    if first == "`" or last == "`":
        lead, trail, literal = _backticks(span)
        if lead or trail:
            return s + lead, e - trail, literal
    if first in _EMPHASIS and not opens:
        return s + _run(span, 0), e, False
    if last in _EMPHASIS and not closes:
        return s, e - _run(span, len(span) - 1), False
    if first == "_" or last == "_":
        lead, trail = _underscores(span)
        lead, trail = 0 if opens else lead, 0 if closes else trail
        if lead or trail:
            return s + lead, e - trail, False
    directive = DIRECTIVE_NAME.match(span)
    if directive is not None:  # a reST directive's or field's name: ".. cmdoption:: --sort-keys"
        return s + directive.end(), e, False
    if first == "#":
        return s + _run(span, 0), e, False
    if last == "#" and _run(span, len(span) - 1) < len(span) and span[-1 - _run(span, len(span) - 1)].isspace():
        return s, e - _run(span, len(span) - 1), False  # a closing heading marker ("## Setup ##"), not C#
    if first in "->+" and len(span) > 1 and span[1].isspace():  # a list bullet or a blockquote marker
        return s + 1, e, False
    if last in "-+" and len(span) > 1 and span[-2].isspace():
        return s, e - 1, False
    if first == "." and not (len(span) > 1 and _word_char(span[1])):  # ".NET" and ".5" keep theirs
        return s + 1, e, False
    if last == "." and not _keeps_full_stop(text, s, e):
        return s, e - 1, False
    if (first in _CLOSERS and not _apostrophe(span, 0)) or (first in _OPENERS and _partner_forward(span, 0) is None):
        return s + 1, e, False
    if last in _OPENERS or (
        last in _CLOSERS and not _apostrophe(span, len(span) - 1) and _partner_backward(span, len(span) - 1) is None
    ):
        return s, e - 1, False
    if first in _STRAIGHT_QUOTES or last in _STRAIGHT_QUOTES:
        new_s, new_e = _straight_quotes(span, s, e)
        return new_s, new_e, False
    return s, e, False


def _word_char(ch: str) -> bool:
    return ch.isalnum()


def inside_word(text: str, char: int) -> bool:
    """Is the boundary before ``text[char]`` inside a word, an identifier, a dotted name or number, an option or a
    mark of markup?

    Inside are the boundaries between two letters or digits, next to an underscore joined to a letter, digit or
    underscore (``HETZNER_API_KEY``, ``__init__``), next to a full stop between a word character and a letter or
    digit (``os.path.join``, ``3.11.2``; a sentence's full stop is followed by a space), next to a hyphen inside an
    option (``--no-cache-dir``, ``-m``) or inside a hyphenated name in a code span (`` `farm-haystack` ``), and
    within reST roles and directive markers and the other marks of :func:`markup_pairs` (``:func:`` of
    ``:func:`open```, the URL of ``[docs](https://...)``, ``<code>``, ``.. seealso::``; not the runs of ``**`` or
    ````` `` `````, which trimming drops). Hyphens in prose (``11-year``, ``Marc-André``) and slashes join nothing.
    """
    if not 0 < char < len(text):
        return False
    before, after = text[char - 1], text[char]
    if _letter_or_digit(before) and _letter_or_digit(after):
        return True
    if (before == "_" and _identifier_char(after)) or (after == "_" and _identifier_char(before)):
        return True
    if before == "." and _letter_or_digit(after) and char >= 2 and _identifier_char(text[char - 2]):
        return True
    if after == "." and _identifier_char(before) and char + 1 < len(text) and _letter_or_digit(text[char + 1]):
        return True
    return char in _joined(text)


def _identifier_char(ch: str) -> bool:
    return ch == "_" or _letter_or_digit(ch)


_OPTION = re.compile(r"(?<![\w.-])--?[A-Za-z](?:[\w-]*\w)?")  # --no-cache-dir, -m; not 11-year nor -1
_HYPHENATED = re.compile(r"[\w.]*\w(?:-[\w.]*\w)+")  # farm-haystack, python-dotenv
_RUNS = frozenset("`*_~!")  # characters of delimiter runs (and the ~ / ! a role's target may start with)
_DIRECTIVE_MARKER = re.compile(r"^[ \t]*\.\.[ \t]+[\w-]+(?::[\w-]+)?::", re.M)  # .. versionadded::


@lru_cache(maxsize=1024)
def _joined(text: str) -> frozenset[int]:
    """Boundaries (character positions) of ``text`` that no phrase may start or end at beyond those of words and
    identifiers: inside options, inside hyphenated names in code spans, within reST roles and directive markers
    and within the marks of markup pairs but between two characters of a delimiter run (the boundary inside
    ``**`` or ````` `` ````` is left: trimming drops the run)."""
    joined: set[int] = set()
    for m in _OPTION.finditer(text):
        joined.update(range(m.start() + 1, m.end()))
    for m in _DIRECTIVE_MARKER.finditer(text):
        joined.update(range(m.start() + 1, m.end()))
    for p in markup_pairs(text):
        joined.update(range(p.open_start + 1, p.open_start + p.role))  # inside a role
        for a, b in ((p.open_start + p.role, p.open_end), (p.close_start, p.close_end)):
            joined.update(c for c in range(a + 1, b) if not (text[c - 1] in _RUNS and text[c] in _RUNS))
        if p.code:
            for m in _HYPHENATED.finditer(text, p.open_end, p.close_start):
                joined.update(range(m.start() + 1, m.end()))
    return frozenset(joined)


def _letter_or_digit(ch: str) -> bool:
    """A word character for WordPiece: a letter or digit outside CJK (split into one word per character)."""
    code = ord(ch)
    cjk = (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2FA1F
        or 0xF900 <= code <= 0xFAFF
        or 0x2F800 <= code <= 0x2FA1F
    )
    return ch.isalnum() and not cjk


def _run(span: str, at: int) -> int:
    """Length of the run of ``span[at]`` that starts (at 0) or ends (at the last index) at ``at``."""
    ch, n = span[at], 1
    step = 1 if at == 0 else -1
    while 0 <= at + step * n < len(span) and span[at + step * n] == ch:
        n += 1
    return min(n, len(span))


def _backtick_runs(span: str) -> list[tuple[int, int]]:
    """(start, length) of each run of backticks in ``span``."""
    return [(m.start(), len(m.group())) for m in re.finditer(r"`+", span)]


def _code_pairs(span: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Backtick runs paired into code spans as markdown reads them: left to right, equal lengths."""
    runs, pairs, i = _backtick_runs(span), [], 0
    while i < len(runs):
        closer = next((j for j in range(i + 1, len(runs)) if runs[j][1] == runs[i][1]), None)
        if closer is None:
            i += 1
            continue
        pairs.append((runs[i], runs[closer]))
        i = closer + 1
    return pairs


def _backticks(span: str) -> tuple[int, int, bool]:
    """Backticks to drop from the edges: (leading, trailing, literal). A span that is exactly one code span loses
    both runs and is literal; an edge run that pairs with no other run is dropped; an edge run closing or opening
    a code span within the span is kept."""
    pairs = _code_pairs(span)
    for (o_start, o_len), (c_start, c_len) in pairs:
        if o_start == 0 and c_start + c_len == len(span):
            return o_len, c_len, True
    paired = {run for pair in pairs for run in pair}
    lead = _run(span, 0) if span[0] == "`" and not any(run[0] == 0 for run in paired) else 0
    trail = _run(span, len(span) - 1) if span[-1] == "`" and not any(sum(run) == len(span) for run in paired) else 0
    if lead and lead == len(span):
        trail = 0
    return lead, trail, False


def _underscores(span: str) -> tuple[int, int]:
    """Underscores to drop from the edges (leading, trailing): ``_`` emphasis, a run at both edges (``_word_``,
    ``__two words__``) or a run detached from the text it would emphasise (``_ word``); a run attached to one word
    only (``_private``) and the double underscores of a special name (``__init__``) are kept."""
    lead = _run(span, 0) if span[0] == "_" else 0
    trail = _run(span, len(span) - 1) if span[-1] == "_" else 0
    if lead and trail and lead == trail and lead + trail < len(span) and not is_dunder(span):
        return lead, trail
    if lead and (lead == len(span) or span[lead].isspace()):
        return lead, 0
    if trail and (trail == len(span) or span[-1 - trail].isspace()):
        return 0, trail
    return 0, 0


def _apostrophe(span: str, at: int) -> bool:
    """Is ``span[at]`` a ’ inside a word (Earth’s), not a quote?"""
    return span[at] == "’" and 0 < at < len(span) - 1 and _word_char(span[at - 1]) and _word_char(span[at + 1])


def _partner_forward(span: str, at: int) -> int | None:
    """Index of the bracket or quote closing ``span[at]`` within the span, or None."""
    opener, closer, depth = span[at], _OPENERS[span[at]], 0
    for i in range(at, len(span)):
        if span[i] == closer and not _apostrophe(span, i):
            depth -= 1
            if depth == 0:
                return i
        elif span[i] == opener:
            depth += 1
    return None


def _partner_backward(span: str, at: int) -> int | None:
    """Index of the bracket or quote opening ``span[at]`` within the span, or None."""
    closer, opener, depth = span[at], _CLOSERS[span[at]], 0
    for i in range(at, -1, -1):
        if span[i] == opener:
            depth -= 1
            if depth == 0:
                return i
        elif span[i] == closer and not _apostrophe(span, i):
            depth += 1
    return None


def _quote_marks(span: str, ch: str) -> list[int]:
    """Positions of the straight quote ``ch`` in ``span`` that are quote marks (not ``'`` inside a word)."""
    inside = [0 < i < len(span) - 1 and _word_char(span[i - 1]) and _word_char(span[i + 1]) for i in range(len(span))]
    return [i for i, c in enumerate(span) if c == ch and not (ch == "'" and inside[i])]


def _straight_quotes(span: str, s: int, e: int) -> tuple[int, int]:
    """An edge straight quote is dropped when the span holds an odd number of them (the trailing one first)."""
    last, first = span[-1], span[0]
    if last in _STRAIGHT_QUOTES and len(_quote_marks(span, last)) % 2:
        return s, e - 1
    if first in _STRAIGHT_QUOTES and len(_quote_marks(span, first)) % 2:
        return s + 1, e
    return s, e


def _keeps_full_stop(text: str, s: int, e: int) -> bool:
    """Is the full stop ending ``text[s:e]`` part of the answer: inside a number or name cut by the span (3.14),
    or ending an abbreviation (U.S., e.g., Inc., J.)?"""
    if e < len(text) and _word_char(text[e]):
        return True
    word = text[s:e].split()[-1].lstrip("([{“‘«\"'")
    return bool(_DOTTED.match(word) or _INITIAL.match(word) or word[:-1].lower() in _ABBREVIATIONS)


class AnswerFolder:
    """Decides, for answers offered best first, which are new and which fold into a better one kept before.

    An answer folds when its SQuAD-normalised text equals a kept answer's, or when its character span overlaps a
    kept answer's span in the same passage.

    Example:
        >>> folder = AnswerFolder()
        >>> folder.keep("100", "p1", 10, 13), folder.keep("`100`", "p2", 4, 9), folder.keep("100 by", "p1", 10, 16)
        (True, False, False)
    """

    def __init__(self) -> None:
        self._texts: set[str] = set()
        self._spans: dict[Hashable, list[tuple[int, int]]] = {}

    def keep(self, text: str, passage: Hashable, start: int, end: int) -> bool:
        """True (and remembered) when the answer is new; False when it folds into one kept before."""
        key = normalize_answer(text)
        spans = self._spans.setdefault(passage, [])
        if key in self._texts or any(start < kept_end and kept_start < end for kept_start, kept_end in spans):
            return False
        self._texts.add(key)
        spans.append((start, end))
        return True


def first_answers(hits: Sequence[Any], order: Iterable[int], k: int, fold: bool = True) -> list[int]:
    """The positions of the first ``k`` hits offered in ``order`` (positions in ``hits``: objects with ``text``,
    ``passage_row``, ``start``, ``end``) that do not fold into one offered before them (:class:`AnswerFolder`;
    ``fold=False`` keeps every hit)."""
    folder, chosen = AnswerFolder(), []
    for i in order:
        if len(chosen) == k:
            break
        hit = hits[i]
        if not fold or folder.keep(hit.text, hit.passage_row, hit.start, hit.end):
            chosen.append(i)
    return chosen


def word_boundaries(index: Any, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Masks over token rows: does each start row begin a word, does each end row finish one?

    Judged on the passage text by :func:`inside_word`: a boundary lies between two characters unless both are word
    characters (letters or digits outside CJK, which WordPiece splits into one word per character), or they join
    an identifier, a dotted name or number or an option, or lie within a reST role, a directive marker, a link's
    URL or an HTML tag.
    """
    rows = np.unique(np.concatenate([starts, ends]))
    picked = np.asarray(index.tokens[rows])  # one read of the token table, then plain Python ints
    passages = index.passages
    begins, finishes = np.empty(len(rows), dtype=bool), np.empty(len(rows), dtype=bool)
    for i, (passage, cs, ce) in enumerate(
        zip(picked["passage"].tolist(), picked["char_start"].tolist(), picked["char_end"].tolist(), strict=True)
    ):
        text = passages[passage]["text"]
        begins[i] = not inside_word(text, cs)
        finishes[i] = not inside_word(text, ce)
    return begins[np.searchsorted(rows, starts)], finishes[np.searchsorted(rows, ends)]


__all__ = [
    "AnswerFolder",
    "MarkupPair",
    "answer_span",
    "first_answers",
    "inside_word",
    "markup_pairs",
    "trim_span",
    "word_boundaries",
]
