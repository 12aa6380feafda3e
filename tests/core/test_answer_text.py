"""Answers that read well: markup and unpaired punctuation trimmed from span edges, duplicate answers folded."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest

from dphr_haystack import InvalidParameterError, PhraseIndex, PhraseSearcher
from dphr_haystack.answers import normalize_answer
from dphr_haystack.confidence import copies_question, question_words
from dphr_haystack.encode.add import add_passages
from dphr_haystack.spans import (
    AnswerFolder,
    MarkupPair,
    answer_span,
    first_answers,
    inside_word,
    markup_pairs,
    trim_span,
    word_boundaries,
)
from tests.conftest import tiny_passages
from tests.core.test_answers_every_unit import CALIBRATION

pytestmark = pytest.mark.unit

# Markdown as in a project's documentation: code spans, emphasis, links, headings, quotes and brackets.
MARKDOWN = [
    ("Setup", "Set `HETZNER_API_KEY` before you run the **deploy** script (see [the guide](setup.md))."),
    ("Retriever", "The default `top_k` is `100` by default; set it to `10` for speed, or `5`."),
    ("Install", "# Installation\n\nRun `pip install farm-haystack[all]` to get every extra, or `pip install it`."),
    ("Hamlet", '"Hamlet" (1603) is a tragedy; see _Hamlet_, Act 1, by *Shakespeare*, U.S. edition.'),
]


@pytest.mark.parametrize(
    ("span", "expected"),
    [
        ("`HETZNER_API_KEY`,", "HETZNER_API_KEY"),  # a code span and a trailing comma
        ("HETZNER_API_KEY`", "HETZNER_API_KEY"),  # an unpaired backtick
        ("`100`", "100"),
        ("``code``", "code"),
        ("`__init__`", "__init__"),  # inside a code span nothing more is trimmed
        ("`a` and `b`", "`a` and `b`"),  # two code spans: both kept whole
        ("**bold**", "bold"),
        ("*Note", "Note"),
        ("_Hamlet_", "Hamlet"),
        ("_private", "_private"),  # an underscore attached to one word is part of it
        ("# Installation", "Installation"),
        ("## Setup ##", "Setup"),
        ("C#", "C#"),
        ("- item", "item"),
        ("top_k:", "top_k"),
        ("Paris;", "Paris"),
        ("Paris.", "Paris"),
        ("3.5.", "3.5"),
        ("etc...", "etc."),
        (". Paris", "Paris"),
        (".NET", ".NET"),
        ("(1889)", "(1889)"),  # balanced pairs stay
        ('"Hamlet"', '"Hamlet"'),
        ("'Hamlet'", "'Hamlet'"),
        ("“quoted”", "“quoted”"),
        ("Washington (state)", "Washington (state)"),
        ("[link](url)", "link"),  # exactly one markdown link: its text
        ("(1889", "1889"),  # unpaired ones go
        ("1889)", "1889"),
        ('"Hamlet', "Hamlet"),
        ('Hamlet"', "Hamlet"),
        ("“quoted", "quoted"),
        ("[link", "link"),
        ("x}", "x"),
        ("(a) b)", "(a) b"),
        ('"a" b"', '"a" b'),
        ("players'", "players"),
        ("Earth's", "Earth's"),  # an apostrophe inside a word is no quote
        ("Earth’s", "Earth’s"),
        ("U.S.", "U.S."),  # abbreviations keep their full stop
        ("e.g.", "e.g."),
        ("Inc.", "Inc."),
        ("J.", "J."),
        ("—Paris—", "Paris"),
        ("**`foo`**", "foo"),
        ("`top_k` (default 10).", "`top_k` (default 10)"),
    ],
)
def test_trim_span_cases(span, expected):
    passage = f"Before {span} after"
    start, end = trim_span(passage, 7, 7 + len(span))
    assert passage[start:end] == expected
    assert 7 <= start <= end <= 7 + len(span)


# (passage, span, answer): markup read from the passage, so a span crossing a code span, an emphasis, a role, a
# link or an HTML element keeps the side it marks up; balanced markup and words stay.
IN_PASSAGE = [
    ("Set `HETZNER_API_KEY` before you run it.", "Set `HETZNER_API_KEY", "HETZNER_API_KEY"),
    ("Set `HETZNER_API_KEY` before you run it.", "HETZNER_API_KEY` before", "HETZNER_API_KEY"),
    ("Use a `HETZNER_API_KEY` here.", "a `HETZNER_API_KEY`", "HETZNER_API_KEY"),  # "a" only says what it is
    ("Use a `HETZNER_API_KEY` here.", "Use a `HETZNER_API_KEY`", "Use a `HETZNER_API_KEY`"),  # balanced: kept
    ("The **MetaFieldRanker** ranks documents.", "The **MetaFieldRanker", "MetaFieldRanker"),
    ("The **MetaFieldRanker** ranks documents.", "MetaFieldRanker** ranks", "MetaFieldRanker"),
    ("The **MetaFieldRanker** ranks documents.", "The **MetaFieldRanker**", "MetaFieldRanker"),
    ("The **MetaFieldRanker** ranks documents.", "**MetaFieldRanker** ranks", "**MetaFieldRanker** ranks"),
    ("it is **bold** now", "is **", "is"),  # nothing marked up inside the span: the other side
    ("the *path* is", "path* is", "path"),
    ("Use ``True`` if so.", "``True", "True"),
    ("A ``KEY`` and ``b``.", "KEY`` and ``b", "KEY"),
    ("see :func:`open` here", ":func:`open`", "open"),  # a reST role and its code span
    ("see :func:`open` here", "func:`open`", "open"),
    ("see :envvar:`PYTHONPATH`, here", ":envvar:`PYTHONPATH`,", "PYTHONPATH"),
    ("see :class:`~pathlib.Path` here", ":class:`~pathlib.Path`", "pathlib.Path"),
    ("see :func:`open` function", ":func:`open` function", "`open` function"),  # the role goes, the words stay
    (
        "call :meth:`con.commit() <Connection.commit>` on it",
        ":meth:`con.commit() <Connection.commit>`",
        "con.commit()",
    ),
    (
        "the :ref:`Microsoft Store\n<windows-store>`, the",
        ":ref:`Microsoft Store\n<windows-store>`,",
        "Microsoft Store",
    ),
    ("the `GNU Readline <https://x.org/rl>`_ library", "`GNU Readline <https://x.org/rl>`_", "GNU Readline"),
    ("see `PKZIP Application Note`_ for it", "`PKZIP Application Note`_", "PKZIP Application Note"),
    ("run ``sys.exit()``.", "``sys.exit()``.", "sys.exit()"),  # a call's parentheses are balanced: kept
    ("run sys.exit().", "sys.exit().", "sys.exit()"),
    ("read [the guide](setup.md) now", "[the guide](setup.md)", "the guide"),
    ("read [the guide](setup.md) now", "the guide](setup.md", "the guide"),
    ("![logo](img/logo.png)", "![logo](img/logo.png)", "logo"),
    ("<code>httpx</code> - Required", "<code>httpx</code>", "httpx"),
    ('<a href="h"><code>httpx</code></a> - Required', "httpx</code></a> - Required", "httpx"),
    ("the _attrs_ classes", "the _attrs", "attrs"),
    ("the _attrs_ classes", "_attrs_ classes", "_attrs_ classes"),
    ("**MetaFieldRanker** ranks, then", "**MetaFieldRanker** ranks,", "**MetaFieldRanker** ranks"),
    ("call __init__ now", "__init__", "__init__"),  # a special name, no emphasis
    (".. function:: join(path, *paths)", "join(path, *paths)", "join(path, *paths)"),  # an unpaired star
    (">>> match('*.PY')\nFalse\n>>> match('*.PY')", "False", "False"),  # doctest lines pair no emphasis
]


@pytest.mark.parametrize(("text", "span", "expected"), IN_PASSAGE)
def test_trim_span_reads_the_markup_of_the_passage(text, span, expected):
    start = text.index(span)
    s, e = trim_span(text, start, start + len(span))
    assert text[s:e] == expected
    assert start <= s <= e <= start + len(span)


RST_AND_MARKDOWN = (
    "Set :envvar:`KEY` (``--no-cache-dir``), see `the guide <https://x.org>`_ and **bold *it*** now.\n\n"
    "Use [the docs](d.md) or <code>httpx</code>; `a` and ``b` `` c, _em_ __init__ *args ``x"
)


def test_trim_span_keeps_its_contract_on_every_span_of_marked_up_text():
    text = RST_AND_MARKDOWN
    for start in range(len(text)):
        for end in range(start, len(text) + 1):
            s, e = trim_span(text, start, end)
            assert start <= s <= e <= end
            assert (s, e) == (start, end) or any(ch.isalnum() for ch in text[s:e])


def test_markup_pairs_of_a_passage():
    text = "Set :envvar:`KEY` or ``--x``; the **MetaFieldRanker** [docs](d.md).\n\nA `lone one"
    pairs = markup_pairs(text)
    assert [text[p.open_start : p.open_end] for p in pairs] == [":envvar:`", "``", "**", "["]
    assert [text[p.close_start : p.close_end] for p in pairs] == ["`", "``", "**", "](d.md)"]
    assert [p.code for p in pairs] == [True, True, False, False]
    assert pairs[0] == MarkupPair(4, 13, 16, 17, code=True, role=8)
    assert markup_pairs("HETZNER_API_KEY and 2 * 3 and os.path") == ()  # no markup in identifiers or arithmetic


@pytest.mark.parametrize(
    ("text", "inside", "outside"),
    [
        ("set HETZNER_API_KEY now", ["HETZNER|_", "HETZNER_|API", "API_|KEY"], ["set |HETZNER", "KEY| now"]),
        ("call __init__ now", ["_|_init", "__|init", "init|__"], ["call |__", "__init__| now"]),
        ("use os.path.join here", ["os|.path", "os.|path", "path.|join"], ["use |os", "join| here"]),
        ("added in 3.11.2.", ["3|.11", "3.|11", "3.11|.2"], ["in |3", "3.11.2|."]),
        ("added in 3.11. Then", [], ["3.11|. Then"]),  # a sentence's full stop
        ("pip --no-cache-dir x", ["-|-no", "--|no", "no|-cache", "cache-|dir"], ["pip |--", "dir| x"]),
        ("python -m pip", ["-|m"], ["python |-m", "-m| pip"]),
        ("install `farm-haystack` now", ["farm|-haystack", "farm-|haystack"], ["`|farm", "haystack|`"]),
        ("an 11-year veteran of the mid-1990s", [], ["11|-year", "11-|year", "mid-|1990s"]),  # prose hyphens
        ("Marc-André Lemburg", [], ["Marc|-André", "Marc-|André"]),
        ("Earth's orbit and Lib/os.py", [], ["Earth|'s", "Lib/|os"]),
    ],
)
def test_inside_word_keeps_identifiers_names_numbers_and_options_whole(text, inside, outside):
    def at(mark: str) -> int:
        left, right = mark.split("|")
        return text.index(left + right) + len(left)

    assert [inside_word(text, at(m)) for m in inside] == [True] * len(inside)
    assert [inside_word(text, at(m)) for m in outside] == [False] * len(outside)


IDENTIFIERS = "Set `HETZNER_API_KEY`, run `pip install --no-cache-dir farm-haystack`, then os.path.join 3.11.2 here."


def test_word_boundaries_refuse_token_rows_inside_identifiers(tiny_model):
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, [{"id": "id", "title": "", "text": IDENTIFIERS}], progress=False)
    rows = np.arange(len(index.tokens))
    begins, finishes = word_boundaries(index, rows, rows)
    starts = {int(t["char_start"]) for t, ok in zip(index.tokens[rows], begins, strict=True) if ok}
    ends = {int(t["char_end"]) for t, ok in zip(index.tokens[rows], finishes, strict=True) if ok}
    for word in ("HETZNER_API_KEY", "--no-cache-dir", "os.path.join", "3.11.2", "farm-haystack"):
        at = IDENTIFIERS.index(word)
        assert at in starts and at + len(word) in ends, word  # the whole token may be an answer
        assert not starts & set(range(at + 1, at + len(word))), word  # no part of it may
        assert not ends & set(range(at + 1, at + len(word))), word
    hits = PhraseSearcher(index, tiny_model, tidy_answers=False).search(
        "Which key must be set?", top_k=50, unit="phrase"
    )
    for hit in hits:
        assert not inside_word(IDENTIFIERS, hit.start) and not inside_word(IDENTIFIERS, hit.end), hit.text


@pytest.mark.parametrize("span", ["(", "`", "**", "...", ",", "''"])
def test_trim_span_never_leaves_an_empty_answer(span):
    assert trim_span(f"a {span} b", 2, 2 + len(span)) == (2, 2 + len(span))
    assert answer_span(f"a {span} b", 2, 2 + len(span)) is None  # which answers nothing


@pytest.mark.parametrize(
    ("text", "span", "expected"),
    [
        ("Note the `log_locals` argument, which outputs a table.", "the `log_locals`", "log_locals"),
        ("The :class:`Queue` class in this module implements it.", "The :class:`Queue` class", "Queue"),
        ("All functions take a *dir* argument which can be used.", "a *dir* argument", "dir"),
        ("It returns a :class:`TarFile`\n   object that streams.", "a :class:`TarFile`\n   object", "TarFile"),
        # words that say more than what kind of thing it is: the span stays
        ("Call the `open` function twice to read it.", "the `open` function twice", "the `open` function twice"),
        ("Use `pip install` or `uv` to set it up.", "`pip install` or `uv`", "`pip install` or `uv`"),
    ],
)
def test_a_marked_element_described_by_its_kind_is_the_answer(text, span, expected):
    start = text.index(span)
    got = trim_span(text, start, start + len(span))
    assert text[slice(*got)] == expected


def test_a_span_of_markup_and_punctuation_only_answers_nothing():
    text = "Python is installed in :file:`/usr/local/bin/python3.11` on Unix."
    at = text.index(":file:")
    assert answer_span(text, at, text.index("/") + 1) is None  # ':file:`/'
    assert trim_span(text, at, text.index("/") + 1) == (at, text.index("/") + 1)
    whole = (at, text.index("` on") + 1)
    assert text[slice(*answer_span(text, *whole))] == "/usr/local/bin/python3.11"


def test_trim_span_keeps_a_full_stop_inside_a_number_the_span_cuts():
    text = "pi is 3.14 here"
    assert trim_span(text, 6, 8) == (6, 8)  # "3." of "3.14"
    with pytest.raises(ValueError, match="outside"):
        trim_span(text, 5, 99)


def test_answer_folder_folds_equal_texts_and_overlapping_spans():
    folder = AnswerFolder()
    assert folder.keep("100", "p1", 10, 13)
    assert not folder.keep("`100`", "p2", 4, 9)  # the same normalised text, another passage
    assert not folder.keep("The 100", "p3", 0, 7)  # articles and punctuation do not count
    assert not folder.keep("100` by default", "p1", 10, 25)  # overlaps the kept span
    assert not folder.keep("x 100", "p1", 8, 11)
    assert folder.keep("by default", "p1", 13, 23)  # touches, does not overlap
    assert folder.keep("other", "p2", 10, 15)  # the same offsets in another passage


def test_first_answers_are_the_first_that_fold_into_none_offered_before_them_in_the_given_order():
    Span = collections.namedtuple("Span", "text passage_row start end")
    hits = [Span("Paris", 0, 0, 5), Span("Paris, France", 0, 0, 13), Span("paris", 1, 4, 9), Span("Lyon", 1, 20, 24)]
    assert first_answers(hits, [0, 1, 2, 3], 10) == [0, 3]
    assert first_answers(hits, [1, 2, 0, 3], 10) == [1, 2, 3]  # "Paris" folds into the longer span offered first
    assert first_answers(hits, [3, 1, 2, 0], 2) == [3, 1]  # at most k
    assert first_answers(hits, [2, 0], 5, fold=False) == [2, 0]


@pytest.fixture
def model_and_index(tiny_model):
    index = PhraseIndex.create(tiny_model)
    passages = tiny_passages() + [{"id": f"m{i}", "title": t, "text": x} for i, (t, x) in enumerate(MARKDOWN)]
    add_passages(index, tiny_model, passages, progress=False)
    return tiny_model, index


QUESTIONS = ["What is the default top_k?", "Which key must be set?", "Who wrote Hamlet?"]


def _key(hit) -> tuple[int, int, int]:
    return hit.passage_row, hit.start_token, hit.end_token


def _expected(index, raw_hits, words, top_k: int) -> list[tuple[str, tuple[int, int, int]]]:
    """The raw ranked spans trimmed (markup and punctuation only: skipped), copies of the question skipped, then
    folded greedily: what tidy answers are."""
    folder, out = AnswerFolder(), []
    for hit in raw_hits:
        text = index.passages[hit.passage_row]["text"]
        span = answer_span(text, hit.start, hit.end)
        if span is None:
            continue
        start, end = span
        if words is not None and copies_question(text[start:end], words):
            continue
        if folder.keep(text[start:end], hit.passage_row, start, end):
            out.append((text[start:end], _key(hit)))
    return out[:top_k]


def test_phrase_answers_are_the_trimmed_spans_folded_best_first(model_and_index):
    model, index = model_and_index
    every = len(index)
    raw = PhraseSearcher(index, model, skip_question_copies=False, tidy_answers=False)
    tidy = PhraseSearcher(index, model)
    q_start, q_end = model.encode_queries(QUESTIONS)
    raw_hits = raw.search_vectors(
        q_start, q_end, top_k=10 * every, candidates=every, questions=QUESTIONS, unit="phrase"
    )
    tidy_hits = tidy.search_vectors(q_start, q_end, top_k=60, candidates=every, questions=QUESTIONS, unit="phrase")
    changed = 0
    for question, raws, hits in zip(QUESTIONS, raw_hits, tidy_hits, strict=True):
        assert [(h.text, _key(h)) for h in hits] == _expected(index, raws, question_words(question), 60)
        by_key = {_key(h): h for h in raws}
        for hit in hits:
            assert hit.text == index.passages[hit.passage_row]["text"][hit.start : hit.end]
            span = by_key[_key(hit)]
            assert span.start <= hit.start <= hit.end <= span.end and hit.score == span.score
            changed += hit.text != span.text
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert len({normalize_answer(h.text) for h in hits}) == len(hits)
        for a in hits:
            for b in hits:
                if a is not b and a.passage_row == b.passage_row:
                    assert a.end <= b.start or b.end <= a.start  # no two answers overlap
    assert changed, "some answer must have been trimmed for this test to mean anything"


def test_top_k_returns_k_different_answers(model_and_index):
    model, index = model_and_index
    raw = PhraseSearcher(index, model, tidy_answers=False).search(QUESTIONS[0], top_k=10, unit="phrase")
    folder = AnswerFolder()
    assert not all(folder.keep(h.text, h.passage_row, h.start, h.end) for h in raw), "raw top 10 has duplicates"
    for top_k in (1, 5, 10, 20):
        hits = PhraseSearcher(index, model).search(QUESTIONS[0], top_k=top_k, unit="phrase")
        assert len(hits) == top_k  # the search went on until it had k different answers
        assert len({normalize_answer(h.text) for h in hits}) == top_k
    assert PhraseSearcher(index, model).search(QUESTIONS[0], top_k=5, unit="phrase")[0].score == raw[0].score


def test_fewer_different_answers_than_asked_returns_all_there_are(tiny_model):
    index = PhraseIndex.create(tiny_model)
    add_passages(index, tiny_model, [{"id": "a", "title": "", "text": "Paris, Paris, Paris."}], progress=False)
    hits = PhraseSearcher(index, tiny_model, skip_question_copies=False).search("where?", top_k=10, unit="phrase")
    assert 1 <= len(hits) < 10 and len({normalize_answer(h.text) for h in hits}) == len(hits)


@pytest.mark.parametrize("unit", ["passage", "document"])
def test_passage_and_document_answers_are_trimmed_and_rankings_unchanged(model_and_index, unit):
    model, index = model_and_index
    raw = PhraseSearcher(index, model, tidy_answers=False).search_batch(QUESTIONS, unit=unit, top_k=8)
    tidy = PhraseSearcher(index, model).search_batch(QUESTIONS, unit=unit, top_k=8)
    for raws, hits in zip(raw, tidy, strict=True):
        assert [(h.title, h.score) for h in hits] == [(h.title, h.score) for h in raws]
        for r, h in zip(raws, hits, strict=True):
            rp = r.best_phrase if unit == "passage" else r.best_passage.best_phrase
            hp = h.best_phrase if unit == "passage" else h.best_passage.best_phrase
            text = index.passages[hp.passage_row]["text"]
            assert (hp.start, hp.end) == trim_span(text, rp.start, rp.end) and hp.text == text[hp.start : hp.end]


def test_confidences_are_those_of_the_unfolded_candidates(model_and_index):
    """Folding leaves the calibrated confidence of each answer as it was: the features see every candidate."""
    model, index = model_and_index
    model.config = dataclasses.replace(model.config, calibration=CALIBRATION.to_dict())
    every = len(index)
    q_start, q_end = model.encode_queries(QUESTIONS[:1])
    raw = PhraseSearcher(index, model, tidy_answers=False)
    tidy = PhraseSearcher(index, model)
    confidence = {
        _key(h): h.confidence
        for h in raw.search_vectors(
            q_start, q_end, top_k=10 * every, candidates=every, questions=QUESTIONS[:1], unit="phrase"
        )[0]
    }
    hits = tidy.search_vectors(q_start, q_end, top_k=10, candidates=every, questions=QUESTIONS[:1], unit="phrase")[0]
    assert len(hits) == 10
    for hit in hits:
        assert hit.confidence == pytest.approx(confidence[_key(hit)], abs=1e-9)
    assert tidy.search(QUESTIONS[0], top_k=1, unit="phrase")[0].confidence == pytest.approx(
        tidy.search(QUESTIONS[0], top_k=5, unit="phrase")[0].confidence
    )


def test_tidy_answers_must_be_a_flag(model_and_index):
    model, index = model_and_index
    with pytest.raises(InvalidParameterError, match="tidy_answers"):
        PhraseSearcher(index, model, tidy_answers="yes")
