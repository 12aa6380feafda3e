"""Answers a user can trust: phrases that copy the question, and a calibrated confidence for phrase answers.

A phrase *copies the question* when its SQuAD-normalised words occur, as whole words and in order, in the
normalised question ("Who won Super Bowl 50?" → "Super Bowl 50"); such a phrase is never the answer.

Raw phrase scores (q_s·h_i + q_e·h_j) rank phrases but do not say how likely an answer is right. A
:class:`Calibration` (:mod:`dphr_haystack.model.calibration`) maps features of a phrase to P(correct) with a
logistic regression fitted on questions with known answers (:func:`fit_calibration`); it is stored in the model's
``dphr_config.json`` (``calibration``) so every index searched with the model reports the same confidences. The
features it names (:func:`answer_features`) are the phrase's score within its query's ranked candidates
(:func:`confidence_features`: raw score, log-softmax, agreement, margin) and, in calibrations that name them, what
the search has at hand about the answer: how many of the question's words its passage holds near it and compared
with the other candidates' passages and in its sentence, how far the nearest of them is, whether it is the kind of
answer the question asks for, its length, how many passages give it, how spread the candidates' scores are. A
calibration may also carry an :class:`AnswerRanker` (:func:`fit_ranker`): a score of those features fitted to put
each question's right answer first; the calibration then weighs an answer's rank score and its log-softmax among
the candidates, so that its confidences order a query's answers as the ranker does.

A calibration may carry an :class:`Answerability` (:func:`fit_answerability`): from features of the whole search
(:func:`query_features`: the top answer's confidence, how much of the question the best passages and titles hold,
how many passages were searched) it gives P(the top answer is right *given this corpus*), low when the corpus holds
no answer (no passage speaks of the question's words); :mod:`dphr_haystack.corpus_judgement` moves every answer's
log-odds by the same amount so that the top answer's confidence is that probability, and scores "no answer".

A ranked list of passages or documents scores each by its answer's confidence, made monotone along the ranking
(:func:`ranked_confidences`): the ranking is by raw score, and a confidence also weighs how its phrase compares
with the other candidates, so a passage's answer can be more confident than the answer of one ranked above it.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from .answers import normalize_answer
from .errors import InvalidParameterError
from .fitting import (
    auroc,
    expected_calibration_error,
    fit_answerability,
    fit_calibration,
    fit_logistic,
    fit_ranker,
    reliability,
)
from .model.calibration import (
    ANSWER_FEATURES,
    CONFIDENCE_DEPTH,
    CORPUS_FEATURE,
    FEATURES,
    KNOWN_FEATURES,
    QUERY_FEATURES,
    RANKER_FEATURES,
    Answerability,
    AnswerRanker,
    Calibration,
    check_features,
    check_query_features,
    sigmoid,
)
from .passage_words import STEM, PassageWords
from .question_words import QuestionWords, name_share, question_names, question_words

__all__ = [
    "ANSWER_FEATURES",
    "CONFIDENCE_DEPTH",
    "FEATURES",
    "KNOWN_FEATURES",
    "QUERY_FEATURES",
    "RANKER_FEATURES",
    "STOPWORDS",
    "SUPPORT_FLOOR",
    "AnswerRanker",
    "Answerability",
    "Calibration",
    "QuestionWords",
    "answer_confidences",
    "answer_features",
    "auroc",
    "confidence_features",
    "copies_question",
    "expected_calibration_error",
    "fit_answerability",
    "fit_calibration",
    "fit_logistic",
    "fit_ranker",
    "name_share",
    "normalized_words",
    "query_features",
    "question_names",
    "question_words",
    "ranked_confidences",
    "reliability",
    "shifted",
]

# Query features read a share s of the question's words as log(SUPPORT_FLOOR + s) (query_features).
SUPPORT_FLOOR = 0.05

# Words of a question that say little about where its answer lies: left out when a passage's support is counted.
STOPWORDS = frozenset(
    "a an the of in on at to for from by with about as into over after before during under between through "
    "and or but not no is are was were be been being has have had do does did can could will would should may "
    "might must shall it its this that these those there their they them he she his her him i you we our your "
    "what which who whom whose when where why how many much one ones other than then also s".split()
)
# How many words either side of an answer count as near it (window_support).
SUPPORT_WINDOW = 20
# support_distance counts at most this many words to the nearest question word.
MAX_DISTANCE = 100
# What kind of answer a question asks for (type_match), tried in order; other questions ask for no known kind.
QUESTION_KINDS = (
    (
        "number",
        re.compile(
            r"\b(how (many|much|long|old|far|large|big|tall|high|often|fast|wide|deep)|when|"
            r"(what|which|in what) (year|percentage|percent|century|decade|date|day|time|age|number|temperature))\b"
        ),
    ),
    ("name", re.compile(r"\b(who|whom|whose|where)\b")),
)
NUMBER_WORDS = frozenset(
    "one two three four five six seven eight nine ten eleven twelve twenty thirty forty fifty hundred thousand "
    "million billion dozen january february march april may june july august september october november december "
    "century".split()
)


class RankedPhrase(Protocol):
    """What the answer features read of a ranked candidate (:class:`dphr_haystack.search.PhraseHit` has it):
    ``text == passages[passage_row]["text"][start:end]``."""

    score: float
    text: str
    passage_row: int
    start: int
    end: int


def copies_question(phrase: str, words: Sequence[str]) -> bool:
    """Does ``phrase`` occur, as whole normalised words in order, in a question of ``words``?

    A phrase with no words left after normalisation (punctuation or an article only) counts as a copy.
    """
    needle = normalize_answer(phrase).split()
    if not needle:
        return True
    n = len(needle)
    return any(list(words[i : i + n]) == needle for i in range(len(words) - n + 1))


def confidence_features(
    scores: Sequence[float], texts: Sequence[str], rows: Sequence[int] | None = None, depth: int = CONFIDENCE_DEPTH
) -> np.ndarray:
    """Features of each candidate phrase within its query's ranked candidates: (n, len(FEATURES)).

    ``scores`` are the candidates' raw scores in descending order and ``texts`` their texts. The first ``depth``
    candidates are the reference list. Per candidate: its raw score; its log-softmax against the reference list; the
    log of the softmax mass of the reference candidates with its normalised text (how much the list agrees on this
    answer); and the margin to the best reference candidate with another text (for the top candidate: how far ahead
    it is; 10 when the whole list agrees). ``rows`` (positions in
    the list) asks for those candidates' features only, the same as the full table's rows.
    """
    s = np.asarray(scores, dtype=np.float64)
    wanted = list(range(len(s))) if rows is None else [int(i) for i in rows]
    if len(s) == 0 or not wanted:
        return np.zeros((0, len(FEATURES)))
    depth = min(len(s), depth)
    keys = {i: normalize_answer(texts[i]) for i in (*range(depth), *wanted)}
    return _score_features(s, keys, wanted, depth)


def _score_features(s: np.ndarray, keys: Mapping[int, str], wanted: list[int], depth: int) -> np.ndarray:
    """:func:`confidence_features` of the candidates ``wanted`` (non-empty), their normalised texts ``keys`` (the
    reference list's and theirs), ``depth`` ≤ ``len(s)``."""
    log_z = s[:depth].max() + np.log(np.exp(s[:depth] - s[:depth].max()).sum())
    p = np.exp(s - log_z)
    # each text of the reference list: the softmax mass of its candidates and the best score of the others
    texts = {key: k for k, key in enumerate(dict.fromkeys(keys[j] for j in range(depth)))}
    text_of = np.array([texts[keys[j]] for j in range(depth)])
    mass, margin_to = {}, {}
    for key, k in texts.items():
        same = text_of == k
        mass[key] = float(p[:depth][same].sum())
        others = s[:depth][~same]
        margin_to[key] = others.max() if len(others) else None
    best = s[:depth].max()
    out = np.empty((len(wanted), len(FEATURES)))
    for row, i in enumerate(wanted):
        key = keys[i]
        total = mass.get(key, 0.0) + (float(p[i]) if i >= depth else 0.0)
        other = margin_to[key] if key in margin_to else best
        out[row] = (s[i], s[i] - log_z, math.log(max(total, 1e-12)), s[i] - other if other is not None else 10.0)
    return out


def normalized_words(text: str) -> list[str]:
    """The SQuAD-normalised words of ``text`` (``normalize_answer(text).split()``)."""
    return normalize_answer(text).split()


def _stems(words: Sequence[str]) -> set[str]:
    return {w[:STEM] for w in words}


def _content_stems(asked: Sequence[str]) -> set[str]:
    return _stems([w for w in asked if w not in STOPWORDS])


class _Support:
    """The share of a question's content words (stopwords left out, matched on their first :data:`STEM` letters)
    that a passage holds, in its title or text, or near an answer; per passage row, computed once. ``words`` reads
    a row's :class:`PassageWords` (e.g. from the index's cache); by default each row is tokenised here."""

    def __init__(
        self,
        asked: Sequence[str],
        passages: Sequence[Mapping[str, Any]],
        words: Callable[[int], PassageWords] | None = None,
    ) -> None:
        self.content = _content_stems(asked)
        self.read = words if words is not None else (lambda row: PassageWords.of(passages[row]))
        self.by_row: dict[int, float] = {}
        self.words: dict[int, PassageWords] = {}
        self.hits: dict[int, list[int]] = {}  # per row: the positions of its words that are content words

    def passage(self, row: int) -> float:
        if row not in self.by_row:
            words = self._words(row)
            self.by_row[row] = self._share(itertools.chain(words.stems, words.title_stems))
        return self.by_row[row]

    def _words(self, row: int) -> PassageWords:
        if row not in self.words:
            self.words[row] = self.read(row)
        return self.words[row]

    def _share(self, stems: Iterable[str]) -> float:
        return len(self.content.intersection(stems)) / len(self.content)

    def near(self, phrase: RankedPhrase) -> float:
        words = self._words(phrase.passage_row)
        below, first = words.ending_by(phrase.start), words.starting_from(phrase.end)
        return self._share(
            words.stems[max(0, below - SUPPORT_WINDOW) : below] + words.stems[first : first + SUPPORT_WINDOW]
        )

    def sentence(self, phrase: RankedPhrase) -> float:
        words = self._words(phrase.passage_row)
        low, high = words.sentence_bounds(phrase.start, phrase.end)
        stop = len(words) if high is None else words.ending_by(high)
        before = words.stems[words.starting_from(low) : words.ending_by(phrase.start)]
        return self._share(before + words.stems[words.starting_from(phrase.end) : stop])

    def distance(self, phrase: RankedPhrase) -> int:
        """Words between the phrase and the nearest content word of its passage, at most :data:`MAX_DISTANCE`."""
        row = phrase.passage_row
        words = self._words(row)
        if row not in self.hits:
            self.hits[row] = [k for k, stem in enumerate(words.stems) if stem in self.content]
        hits = self.hits[row]
        below, first = words.ending_by(phrase.start), words.starting_from(phrase.end)
        nearest = MAX_DISTANCE
        k = bisect.bisect_left(hits, below)  # hits[k - 1]: the last content word before the phrase
        if k:
            nearest = min(nearest, below - 1 - hits[k - 1])
        k = bisect.bisect_left(hits, first)  # hits[k]: the first one after it
        if k < len(hits):
            nearest = min(nearest, hits[k] - first)
        return nearest


def answer_features(
    names: Sequence[str],
    candidates: Sequence[RankedPhrase],
    rows: Sequence[int] | None = None,
    asked: Sequence[str] | None = None,
    passages: Sequence[Mapping[str, Any]] | None = None,
    ranker: AnswerRanker | None = None,
    depth: int = CONFIDENCE_DEPTH,
    words: Callable[[int], PassageWords] | None = None,
) -> np.ndarray:
    """The features ``names`` (of :data:`KNOWN_FEATURES`) of candidates within their query's ranked candidates:
    (len(rows), len(names)), rows in the order of ``rows`` (positions in ``candidates``; default all).

    ``candidates`` are ranked best first (descending score); the first ``depth`` are the reference list, as in
    :func:`confidence_features`, which gives :data:`FEATURES`. The answer features:

    - ``window_support``: the share of the question's content words (``asked``, its normalised words, stopwords
      left out; words match on their first :data:`STEM` letters) within :data:`SUPPORT_WINDOW` words either side
      of the phrase in its passage;
    - ``support_gap``: the share of them the phrase's passage holds (title and text) minus the largest share among
      the reference list's other passages (its own share when there are none);
    - ``answer_words``: the phrase's normalised words;
    - ``agreeing_passages``: how many passages of the reference list give the phrase's normalised text (its own
      passage counted);
    - ``score_spread``: the standard deviation of the reference list's scores;
    - ``sentence_support``: the share of the question's content words in the phrase's sentence (the phrase left out);
    - ``support_distance``: log(1 + the number of words between the phrase and the nearest of them in its passage),
      at most log(1 + :data:`MAX_DISTANCE`);
    - ``type_match``: 1 when the question asks for a number or date (how many, when, what year...) and the phrase
      holds a digit or a number or month word, or asks for a name (who, where) and the phrase starts with a capital
      letter; 0 when it asks and the phrase does not fit; NaN for other questions (what, which...);
    - ``question_overlap``: the share of the phrase's normalised words that the question holds;
    - ``best_score``: the best score of the reference list (the same for every candidate of a query).

    ``passages`` are the passage records by row (``{"text", "title"}``, e.g. ``PhraseIndex.passages``); ``words``,
    when given, reads a row's :class:`~dphr_haystack.passage_words.PassageWords` (e.g. kept by the index,
    :meth:`~dphr_haystack.index.phrase_index.PhraseIndex.passage_cache`), else each passage is tokenised anew.
    A feature that needs what is not given (no ``asked``, or a question with no content words) is NaN: a
    :class:`Calibration` counts it at its mean. With a ``ranker`` the names may also be :data:`RANKER_FEATURES`:
    ``rank_score`` (the ranker's score of the candidate) and ``rank_log_softmax`` (that score's log-softmax against
    the reference list's, the candidate's own counted in when it lies below the list).

    Raises:
        InvalidParameterError: An unknown feature name, or passage features asked for without ``passages``.
    """
    names = check_features(tuple(names), ranked=ranker is not None)
    if ranker is not None and set(names) & set(RANKER_FEATURES):
        return _ranked_features(names, candidates, rows, asked, passages, ranker, depth, words)
    wanted = list(range(len(candidates))) if rows is None else [int(i) for i in rows]
    out = np.full((len(wanted), len(names)), np.nan)
    if not wanted:
        return out
    column = {name: j for j, name in enumerate(names)}
    depth = min(len(candidates), depth)
    keys = {i: normalize_answer(candidates[i].text) for i in (*range(depth), *wanted)}
    if any(name in column for name in FEATURES):
        scored = _score_features(np.array([c.score for c in candidates], dtype=np.float64), keys, wanted, depth)
        for k, name in enumerate(FEATURES):
            if name in column:
                out[:, column[name]] = scored[:, k]
    if not any(name in column for name in ANSWER_FEATURES):
        return out
    reference = candidates[:depth]
    needs_passages = {"window_support", "support_gap", "sentence_support", "support_distance"} & set(names)
    if needs_passages and passages is None:
        raise InvalidParameterError(f"features {sorted(needs_passages)} need the passages the candidates come from")
    has_content = asked is not None and bool(_content_stems(asked))
    support = _Support(asked, passages, words) if needs_passages and has_content else None
    spread = float(np.std([c.score for c in reference]))
    best = float(max(c.score for c in reference))
    kind = question_kind(" ".join(asked)) if asked is not None and "type_match" in column else None
    asked_set = set(asked or ())
    giving: dict[str, set[int]] = {}  # each normalised text of the reference list: the passages that give it
    for j in range(depth):
        giving.setdefault(keys[j], set()).add(reference[j].passage_row)
    # the two best-supported passages of the reference list: the best other than any one passage is among them
    held = {c.passage_row: support.passage(c.passage_row) for c in reference} if support is not None else {}
    best_held = sorted(held.items(), key=lambda item: -item[1])[:2]
    for r, i in enumerate(wanted):
        phrase = candidates[i]
        if "answer_words" in column:
            out[r, column["answer_words"]] = len(keys[i].split())
        if "agreeing_passages" in column:
            out[r, column["agreeing_passages"]] = len(giving.get(keys[i], set()) | {phrase.passage_row})
        if "score_spread" in column:
            out[r, column["score_spread"]] = spread
        if support is not None and "window_support" in column:
            out[r, column["window_support"]] = support.near(phrase)
        if support is not None and "support_gap" in column:
            other = next((share for row, share in best_held if row != phrase.passage_row), 0.0)
            out[r, column["support_gap"]] = support.passage(phrase.passage_row) - other
        if support is not None and "sentence_support" in column:
            out[r, column["sentence_support"]] = support.sentence(phrase)
        if support is not None and "support_distance" in column:
            out[r, column["support_distance"]] = math.log1p(support.distance(phrase))
        if "type_match" in column and kind is not None:
            out[r, column["type_match"]] = float(fits_kind(kind, phrase.text))
        if "question_overlap" in column and asked is not None:
            words = keys[i].split()
            out[r, column["question_overlap"]] = sum(w in asked_set for w in words) / len(words) if words else 0.0
        if "best_score" in column:
            out[r, column["best_score"]] = best
    return out


def _ranked_features(
    names: tuple[str, ...],
    candidates: Sequence[RankedPhrase],
    rows: Sequence[int] | None,
    asked: Sequence[str] | None,
    passages: Sequence[Mapping[str, Any]] | None,
    ranker: AnswerRanker,
    depth: int,
    words: Callable[[int], PassageWords] | None,
) -> np.ndarray:
    """:func:`answer_features` with :data:`RANKER_FEATURES` among ``names``."""
    wanted = list(range(len(candidates))) if rows is None else [int(i) for i in rows]
    depth = min(len(candidates), depth)
    scored = sorted({*range(depth), *wanted})  # the reference list and the rows asked for
    plain = tuple(dict.fromkeys(n for n in (*names, *ranker.features) if n not in RANKER_FEATURES))
    table = (
        answer_features(plain, candidates, scored, asked, passages, depth=depth, words=words)
        if plain
        else np.zeros((len(scored), 0))
    )
    at = {i: k for k, i in enumerate(scored)}
    rank = ranker.scores(table[:, [plain.index(n) for n in ranker.features]])
    reference = rank[[at[i] for i in range(depth)]]
    log_z = float(np.logaddexp.reduce(reference)) if depth else 0.0
    out = np.empty((len(wanted), len(names)))
    for r, i in enumerate(wanted):
        own = rank[at[i]]
        values = {
            "rank_score": own,
            "rank_log_softmax": own - (log_z if i < depth else float(np.logaddexp(log_z, own))),
        }
        out[r] = [values[n] if n in values else table[at[i], plain.index(n)] for n in names]
    return out


def question_kind(question: str) -> str | None:
    """What kind of answer a question asks for, by its words: ``"number"`` (a number or date), ``"name"`` (a person
    or place) or None."""
    text = question.lower()
    return next((kind for kind, pattern in QUESTION_KINDS if pattern.search(text)), None)


def fits_kind(kind: str, phrase: str) -> bool:
    """Does ``phrase`` look like an answer of ``kind`` (:func:`question_kind`)?"""
    if kind == "number":
        return any(ch.isdigit() for ch in phrase) or bool(NUMBER_WORDS & set(normalized_words(phrase)))
    return phrase[:1].isupper()


def answer_confidences(
    calibration: Calibration,
    candidates: Sequence[RankedPhrase],
    rows: Sequence[int],
    asked: Sequence[str] | None = None,
    passages: Sequence[Mapping[str, Any]] | None = None,
    words: Callable[[int], PassageWords] | None = None,
) -> np.ndarray:
    """P(correct) of the candidates at ``rows`` within their query's ranked ``candidates``, by ``calibration``
    over the features it names (:func:`answer_features`; ``words`` as there): (len(rows),)."""
    features = answer_features(
        calibration.features, candidates, rows, asked, passages, calibration.ranker, calibration.depth, words
    )
    return calibration.confidence(features)


def query_features(
    names: Sequence[str],
    candidates: Sequence[RankedPhrase],
    top: int,
    top_confidence: float,
    asked: Sequence[str] | None,
    passages: Sequence[Mapping[str, Any]],
    searched: int,
    depth: int = CONFIDENCE_DEPTH,
    words: Callable[[int], PassageWords] | None = None,
    written: Callable[[Sequence[str]], bool] | None = None,
) -> np.ndarray:
    """The features ``names`` (of :data:`QUERY_FEATURES`) of one query's search: (len(names),).

    ``candidates`` are its ranked candidates (best score first; the first ``depth`` are the reference list),
    ``top`` the position of its top answer and ``top_confidence`` that answer's calibrated confidence, ``searched``
    the number of passages the search could return. The features:

    - ``top_logit``: the log-odds of ``top_confidence``;
    - ``top_support`` / ``best_support``: the share of the question's content words (as :func:`answer_features`
      counts them) that the top answer's passage holds, and the largest share a passage of the reference list holds;
    - ``best_title_support``: the largest share that a reference passage's title holds (``_`` read as a space);
    - ``window_support`` / ``sentence_support``: those of the top answer (:func:`answer_features`);

    each share s as log(:data:`SUPPORT_FLOOR` + s): what tells an answerable question from one whose answer the
    corpus lacks is mostly a low share, and a high one should not raise the confidence of a wrong answer in the
    right passage much (on held-out SQuAD questions the log kept AUROC right vs wrong 0.01 higher at the same
    separation of answerable from unanswerable questions);
    - ``log_passages``: log(1 + ``searched``);
    - ``best_score``: the best raw score of the reference list;
    - ``top_name_support`` / ``best_name_support``: the share of the question's names (``asked.names``, see
      :func:`question_names`: "Port Calder", "2023", "3.0") that the top answer's passage holds, and the largest
      share a passage of the reference list holds (:func:`name_share`, logged as the shares above): a question
      about another town, company or version than the corpus' own shares most of its words with an answerable
      one, but not its names;
    - ``has_names``: 1.0 when the question has names, 0.0 when it has none (a question written in lower case has
      those its truecasing by the corpus gives it: :class:`~dphr_haystack.search.PhraseSearcher`);
    - ``all_names_in_corpus``: 1.0 when the corpus searched writes every name of the question somewhere (and for
      a question without names), 0.0 when some name is written nowhere in it (``written``,
      :func:`dphr_haystack.corpus_words.names_written`; NaN without it): a question about another town or company
      names what no passage writes.

    A feature that needs the question's words is NaN without them (an :class:`Answerability` counts it at its mean);
    so are the name shares for a question without names, and every name feature when ``asked`` is a plain
    sequence of words.
    """
    names = check_query_features(tuple(names))
    out = np.full(len(names), np.nan)
    column = {name: j for j, name in enumerate(names)}
    depth = max(1, min(len(candidates), depth))
    reference = candidates[:depth]
    phrase = candidates[top]
    c = min(max(float(top_confidence), 1e-6), 1 - 1e-6)
    values: dict[str, float] = {
        "top_logit": math.log(c / (1 - c)),
        "log_passages": math.log1p(max(0, int(searched))),
        "best_score": float(max(p.score for p in reference)),
    }
    if asked is not None and _content_stems(asked):
        support = _Support(asked, passages, words)
        titles = {p.passage_row: str(passages[p.passage_row].get("title") or "") for p in reference}
        shares = {
            "top_support": support.passage(phrase.passage_row),
            "best_support": max(support.passage(p.passage_row) for p in reference),
            "best_title_support": max(
                support._share(_stems(normalized_words(title.replace("_", " ")))) for title in titles.values()
            ),
            "window_support": support.near(phrase),
            "sentence_support": support.sentence(phrase),
        }
        named = getattr(asked, "names", None)  # the question's names (QuestionWords), None for plain words
        if named is not None:
            values["has_names"] = float(bool(named))
            if not named and written is not None:
                values[CORPUS_FEATURE] = 1.0  # no name the corpus could fail to write
        if named:
            held = {row: name_share(named, passages[row]) for row in dict.fromkeys(p.passage_row for p in reference)}
            row = phrase.passage_row
            shares["top_name_support"] = held[row] if row in held else name_share(named, passages[row])
            shares["best_name_support"] = max(held.values())
            if written is not None and CORPUS_FEATURE in column:
                values[CORPUS_FEATURE] = float(written(named))
        values.update({name: math.log(SUPPORT_FLOOR + share) for name, share in shares.items()})
    for name, j in column.items():
        if name in values:
            out[j] = values[name]
    return out


def shifted(confidence: float, shift: float) -> float:
    """``confidence`` with its log-odds moved by ``shift`` (:func:`dphr_haystack.corpus_judgement.judge_corpus`)."""
    return float(sigmoid(np.asarray(logit(confidence) + shift))) if shift else float(confidence)


def logit(p: float) -> float:
    """The log-odds of ``p``, clipped to [1e-6, 1 − 1e-6] first."""
    return math.log((p := min(max(p, 1e-6), 1 - 1e-6)) / (1 - p))


def ranked_confidences(confidences: Sequence[float | None]) -> list[float]:
    """Scores in [0, 1] for ranked results from their answers' confidences (None: the result gives no answer).

    Result i scores the lowest confidence among the answers of results 1..i, so scores never rise down the
    ranking and a threshold t keeps a prefix of it in which every answer has confidence >= t; a score equals its
    own answer's confidence unless an answer ranked above it is less confident. A result without an answer takes
    the score of the result above it (of the first one below it that has an answer, when none above has one);
    when no result has an answer, every score is 0.

    Example:
        >>> ranked_confidences([0.6, 0.7, None, 0.2, 0.4])
        [0.6, 0.6, 0.6, 0.2, 0.2]
    """
    known = [float(c) for c in confidences if c is not None]
    if not known:
        return [0.0] * len(confidences)
    low = known[0]
    out = []
    for c in confidences:
        if c is not None:
            low = min(low, float(c))
        out.append(low)
    return out
