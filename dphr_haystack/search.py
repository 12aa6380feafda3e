"""Span search over a PhraseIndex: MIPS for start and end tokens, then exact span scoring.

For each query, FAISS returns the top-c start tokens (by q_s·h) and top-c end tokens (by q_e·h). Each
start hit i is paired with its best end j in the same passage with 0 ≤ pos(j) − pos(i) < L, each end
hit with its best start, scoring s(i, j) = q_s·h_i + q_e·h_j exactly from the stored vectors
(DensePhrases' ``search_phrase``). Passages score their best phrase (Lee et al. 2021b, Eq. 3),
documents their best passage; with ``passage_scoring="logsumexp"`` a passage (document) scores the log-sum-exp
of all its retrieved phrases' scores instead (up to a constant shared by all passages, the log of its probability
under the softmax over the retrieved phrases), so that a passage with several good answer candidates can rank
above one with a single slightly better one. When deleted or filtered-out passages leave fewer than k results, c is
doubled and the search repeated, until k results or the whole index has been seen. With ``whole_words`` (the
default) a phrase may neither start nor end inside a word: a WordPiece start such as ``##ak`` or an end
followed by one (``Gary Kubia|k``) is never paired. With ``skip_question_copies`` (the default) a phrase that
the question itself contains is never a phrase answer, and with a calibration (the model's, by default) every
phrase answer carries a confidence in [0, 1] (:mod:`dphr_haystack.confidence`). With ``tidy_answers`` (the default)
answers lose markup and unpaired punctuation at their edges, and phrase answers that repeat a better one (the same
normalised text, or an overlapping span of the same passage) are folded into it (:mod:`dphr_haystack.spans`), so
that top-k phrases are k different answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ._util.groups import argmax_groups
from ._util.threads import resolve_threads, using_threads
from .confidence import Calibration, answer_confidences, copies_question, question_words, shifted
from .corpus_judgement import CorpusJudgement, corpus_judges, judge_corpus, reads_corpus
from .corpus_words import corpus_words, names_written
from .errors import InvalidParameterError, InvalidQueryError, ModelMismatchError
from .hits import DocumentHit, Hit, PassageHit, PhraseHit, best_passage, best_phrase
from .index.keys import KEY_HITS_PER_CANDIDATE, best_rows_of_passages_hit
from .index.phrase_index import PhraseIndex
from .index.rounds import TokenRounds
from .model.calibration import NAME_FEATURES
from .model.truecase import corpus_cased, corpus_truecaser, is_all_lowercase
from .params import check_param
from .passage_words import cached_words
from .question_words import QuestionWords
from .search_options import (
    DEFAULT_SEARCH_OPTIONS,
    PhraseSearchOptions,
    SearchOptionAttributes,
    check_unit,
)
from .spans import AnswerFolder, answer_span, first_answers, trim_span, word_boundaries
from .verification import check_verification, verification_of, verification_reader, verify_batch

# Start and end tokens searched first, per result asked for: passages and documents gather several phrases
# each, so their first search takes more candidates instead of re-searching the index at 2c, 4c, ... (each
# search scans the index anew). benchmarks/index/unit_search.py on SQuAD-open-small (1.7M vectors, top 20):
# passages 1.05 searches a query and p50 127 ms at 8 (2.0 and 224 ms at 2), documents 1.45 and 135 ms at 16
# (3.8 and 332 ms at 2), the same accuracy.
FIRST_CANDIDATES_PER_RESULT = {"phrase": 1, "passage": 8, "document": 16}
# Results a confidence ranking reorders, whatever top_k is: the first RANKING_POOL[unit] passages or documents by
# score, or the first calibration.depth phrase answers (50 for the shipped default: the ranker was fitted to order as
# many). On SQuAD-open-small (2,000 questions the calibration never saw) it lifts EM@1 from 32.85 to 45.20 and
# passage acc@1 from 55.95 to 74.35 for the default (benchmarks/quality/confidence_ranking.py; depths compared in
# quality/ranking_depth.py).
RANKING_POOL = {"passage": 10, "document": 10}


class PhraseSearcher(SearchOptionAttributes):
    """Searches a :class:`PhraseIndex` with a phrase model's query encoders.

    Thread safe: one searcher may serve many threads; each gets exactly the results of a serial search.

    Its options are a :class:`~dphr_haystack.search_options.PhraseSearchOptions` (the one search contract of every
    front end; ``options``, with any option given by name in its place; each readable as an attribute), with
    ``max_answer_length`` resolved to the model's when None and checked against its passage window; ``search``'s
    ``unit`` and ``top_k`` (None) are the options' (``passage``, 10). How the search uses them:
    ``skip_question_copies`` drops phrase answers that the question contains (normalised whole words, see
    :func:`dphr_haystack.confidence.copies_question`): a passage or document then answers with its best phrase
    that is no copy (flagged ``copies_question`` when all its retrieved phrases are copies).
    ``truecase`` learns the case of words from the index's own passages and the model's cased vocabulary
    (:func:`dphr_haystack.model.truecase.corpus_truecaser`).
    ``ranking="confidence"`` orders the first results by score (as many phrase answers as the calibration's depth;
    :data:`RANKING_POOL` passages or documents), then by the calibrated confidence of their answer (scores stay the
    phrase scores; a passage or document answers with its most confident phrase).
    ``query_precision="int8"``: :mod:`dphr_haystack.model.int8`. ``verify``: a reader reads each query's top answer
    (:mod:`dphr_haystack.verification`). ``scale_score`` and ``no_answer`` shape the results
    the front ends build from the hits (:mod:`dphr_haystack.documents.results`), not the hits.

    The searcher's own settings:
    ``calibration`` gives phrase answers a confidence: ``"model"`` (default) takes the model's stored
    calibration (none: no confidence), ``None`` turns it off, or pass a :class:`Calibration`. Every unit's answers
    get it: a passage's or document's best phrase has the confidence it has among the ranked phrase answers of
    the same search, as with ``unit="phrase"``.
    ``tidy_answers`` (default True) trims markup and unpaired punctuation from every answer's edges
    (:func:`dphr_haystack.spans.trim_span`: `` `top_k`, `` → ``top_k``; ``(1889)`` stays) and, for
    ``unit="phrase"``, never answers with a span of markup and punctuation only (`` :file:`/ ``) and folds an answer
    into a better one with the same normalised text or an overlapping span in the
    same passage (:class:`dphr_haystack.spans.AnswerFolder`), searching further until top-k different answers are
    found (or the index is exhausted). Scores, confidences and passage rankings are those of the scored spans;
    confidences are computed over the unfolded candidates, as the calibration was fitted. False returns the raw
    spans of DensePhrases' search.

    Example:
        >>> searcher = PhraseSearcher(index, model, unit="phrase")
        >>> searcher.search("Who wrote Hamlet?", top_k=5)[0].text
    """

    def __init__(
        self,
        index: PhraseIndex,
        model=None,
        options: PhraseSearchOptions = DEFAULT_SEARCH_OPTIONS,
        *,
        calibration: Calibration | str | None = "model",
        tidy_answers: bool = True,
        **option_values: Any,
    ) -> None:
        if not isinstance(options, PhraseSearchOptions):
            raise InvalidParameterError(f"options must be PhraseSearchOptions, got {type(options).__name__}")
        options = options.replaced(**option_values)
        self.index = index
        if not isinstance(tidy_answers, bool):
            raise InvalidParameterError(f"tidy_answers={tidy_answers!r}; valid: true or false")
        self.tidy_answers = tidy_answers
        self.model = model
        if isinstance(calibration, str):
            if calibration != "model":
                raise InvalidParameterError(f"calibration={calibration!r}: 'model', None or a Calibration")
            stored = getattr(getattr(model, "config", None), "calibration", None)
            calibration = Calibration.from_dict(stored) if stored else None
        self.calibration = calibration
        longest = options.max_answer_length
        if longest is None:
            longest = model.config.max_answer_length if model is not None else 10
        window = _passage_window(index, model)
        longest = check_param(
            "max_answer_length", longest, high=window, why=f"the model's passage window of {window} subwords"
        )
        self.search_options = options.replaced(max_answer_length=longest)
        if options.verify:  # refused here, not at the first query
            check_verification(calibration)

    def warm_up(self) -> None:
        """Read now what the first questions would otherwise wait for (seconds each at 200,000 passages): the words
        of the index's passages, when the calibration weighs whether the corpus writes a question's names, and the
        truecaser learnt from them, when a question in lower case would be truecased, and the verification's reader,
        when the searcher verifies."""
        if self.calibration is not None and reads_corpus(self.calibration):
            corpus_words(self.index)
        if self.model is not None and (self._truecases() or self._reads_names()):
            corpus_truecaser(self.index, self.model.tokenizer.get_vocab)
        if self.verify:
            verification_reader(verification_of(self.calibration))

    def _truecases(self) -> bool:
        """Whether queries in lower case are truecased before they are encoded."""
        return bool(self.model.config.truecase if self.truecase is None else self.truecase)

    def _reads_names(self) -> bool:
        """Whether a model of the calibration weighs the question's names (read from its truecasing when the
        question is in lower case)."""
        return any(set(judge.features).intersection(NAME_FEATURES) for judge in corpus_judges(self.calibration))

    def search(
        self,
        query: str,
        unit: str | None = None,
        top_k: int | None = None,
        allowed_passages: np.ndarray | None = None,
    ) -> list[Hit]:
        """Top-k phrases, passages or documents for one query (``unit``, ``top_k``: None for the options')."""
        return self.search_batch([query], unit, top_k, allowed_passages)[0]

    def search_batch(
        self,
        queries: Sequence[str],
        unit: str | None = None,
        top_k: int | None = None,
        allowed_passages: np.ndarray | None = None,
    ) -> list[list[Hit]]:
        """Top-k results per query; queries are encoded in batches. Raises InvalidQueryError on empty ones."""
        if self.model is None:
            raise InvalidParameterError("PhraseSearcher needs a model to encode text queries")
        if isinstance(queries, str):
            raise InvalidQueryError("search_batch takes a list of queries, not one string")
        texts = list(queries)
        # the index's own passages teach the truecaser (built only when a query needs it, or at warm_up)
        caser = (
            corpus_truecaser(self.index, self.model.tokenizer.get_vocab)
            if self._truecases() and any(isinstance(q, str) and is_all_lowercase(q) for q in texts)
            else None
        )
        with using_threads(resolve_threads(self.threads, "query")):
            q_start, q_end = self.model.encode_queries(
                texts,
                batch_size=self.batch_size,
                truecase=caser is not None,
                truecaser=caser,
                precision=self.query_precision,
            )
            results = self.search_vectors(q_start, q_end, unit, top_k, allowed_passages, questions=texts)
            return verify_batch(results, texts, self.index, self.calibration) if self.verify else results

    def search_vectors(
        self,
        q_start: np.ndarray,
        q_end: np.ndarray,
        unit: str | None = None,
        top_k: int | None = None,
        allowed_passages: np.ndarray | None = None,
        candidates: int | None = None,
        questions: Sequence[str] | None = None,
    ) -> list[list[Hit]]:
        """Search with precomputed query vectors (n, d). ``candidates`` fixes c (no doubling); ``unit``, ``top_k``:
        None for the options'.

        ``questions`` (the query texts) let phrase answers that copy the question be skipped.
        """
        unit = self.unit if unit is None else check_unit(unit)
        top_k = self.top_k if top_k is None else check_param("top_k", top_k)
        if candidates is not None:
            candidates = check_param("candidates", candidates)
        q_start = np.ascontiguousarray(q_start, dtype=np.float32)
        q_end = np.ascontiguousarray(q_end, dtype=np.float32)
        if q_start.ndim != 2 or q_start.shape != q_end.shape or q_start.shape[1] != self.index.dim:
            raise ModelMismatchError(
                f"query vectors of shape {q_start.shape} / {q_end.shape} do not fit an index of "
                f"{self.index.dim}-dimensional vectors"
            )
        n_queries, total = len(q_start), len(self.index)
        results: list[list[Hit]] = [[] for _ in range(n_queries)]
        if n_queries == 0 or total == 0:
            return results
        allowed = ~self.index.deleted
        if allowed_passages is not None:
            allowed = allowed & np.asarray(allowed_passages, dtype=bool)
        searched = int(allowed.sum())  # the passages this search can return: the corpus its answers come from
        if not searched:
            return results
        written = names_written(self.index, allowed)  # which of a question's names they write (read when asked)
        if questions is not None and len(questions) != n_queries:
            raise InvalidParameterError(f"{len(questions)} question texts for {n_queries} query vectors")
        asked = self._question_words(questions) if questions is not None else None  # confidence features
        words = asked if self.skip_question_copies else None
        calibration = self.calibration
        by_confidence = self.ranking == "confidence" and calibration is not None
        if by_confidence:  # results ranked before the cut to top_k
            wanted = max(top_k, calibration.depth if unit == "phrase" else RANKING_POOL[unit])
        else:
            wanted = top_k
        first = wanted * FIRST_CANDIDATES_PER_RESULT[unit]
        # confidences look at a fixed number of candidates, whatever top_k is (passages and documents keep
        # their own candidates)
        if calibration is not None and unit == "phrase":
            first = max(first, calibration.depth)
        c = min(candidates or first, total)
        hits_per = KEY_HITS_PER_CANDIDATE if self.index.key_vectors else 1
        pending = np.arange(n_queries)
        rounds = TokenRounds(self.index, q_start, q_end, c * hits_per, ahead=candidates is None)  # several rounds
        while len(pending):
            ids = rounds.rows(c * hits_per, pending)
            still = []
            for pos, qi in enumerate(pending):
                starts, ends = ids[pos], ids[pos + len(pending)]
                if self.index.key_vectors:
                    starts, ends = best_rows_of_passages_hit(
                        self.index, q_start[qi], q_end[qi], (starts, ends), allowed, c
                    )
                phrases = self._spans(q_start[qi], q_end[qi], starts, ends, allowed)
                if unit == "phrase":
                    hits = _phrase_answers(
                        self.index,
                        phrases,
                        wanted,
                        words[qi] if words else None,
                        calibration,
                        self.tidy_answers,
                        asked[qi] if asked else None,
                        by_confidence,
                        searched,
                        written,
                    )
                else:
                    hits = _aggregate(
                        self.index,
                        phrases,
                        unit,
                        wanted,
                        self.passage_scoring,
                        words[qi] if words else None,
                        calibration,
                        self.tidy_answers,
                        asked[qi] if asked else None,
                        by_confidence,
                        searched,
                        written,
                    )
                hits = _by_confidence(hits)[:top_k] if by_confidence else hits
                results[qi] = hits
                if len(hits) < top_k and c < total and candidates is None:
                    still.append(qi)
            pending = np.asarray(still, dtype=np.int64)
            c = min(2 * c, total)
        return results

    def _question_words(self, questions: Sequence[str]) -> list[QuestionWords]:
        """Each question's words for the confidence features; with an answerability (or holds-answer) that reads
        names, a question written in lower case (as NQ's are) reads them from its truecasing by the index's
        passages."""
        cased: list[str | None] = [None] * len(questions)
        if self._reads_names():
            cased = corpus_cased(self.index, questions, self.model.tokenizer.get_vocab if self.model else ())
        return [question_words(q, c) for q, c in zip(questions, cased, strict=True)]

    def _spans(
        self, qs: np.ndarray, qe: np.ndarray, start_ids: np.ndarray, end_ids: np.ndarray, allowed: np.ndarray
    ) -> list[tuple[float, int, int, float, float]]:
        """Best span for every start hit and every end hit: (score, start row, end row, s_score, e_score)."""
        L = self.max_answer_length
        tokens = self.index.tokens
        total = len(tokens)
        start_ids = np.unique(start_ids[start_ids >= 0])
        end_ids = np.unique(end_ids[end_ids >= 0])
        offsets = np.arange(L)
        # Candidate (start, end) pairs: right of each start hit, left of each end hit.
        s_from_start = np.repeat(start_ids, L)
        e_from_start = (start_ids[:, None] + offsets[None, :]).ravel()
        e_from_end = np.repeat(end_ids, L)
        s_from_end = (end_ids[:, None] - offsets[None, :]).ravel()
        starts = np.concatenate([s_from_start, s_from_end])
        ends = np.concatenate([e_from_start, e_from_end])
        in_range = (starts >= 0) & (ends < total)
        starts, ends = starts[in_range], ends[in_range]
        s_tok, e_tok = tokens[starts], tokens[ends]
        valid = (
            (s_tok["passage"] == e_tok["passage"])
            & (e_tok["position"] >= s_tok["position"])
            & (e_tok["position"] - s_tok["position"] < L)
        )
        starts, ends = starts[valid], ends[valid]
        if len(starts) == 0:
            return []
        passage_rows = tokens["passage"][starts]
        keep = allowed[passage_rows]
        starts, ends = starts[keep], ends[keep]
        if self.whole_words and len(starts):
            starts_word, ends_word = word_boundaries(self.index, starts, ends)
            whole = starts_word & ends_word
            starts, ends = starts[whole], ends[whole]
        if len(starts) == 0:
            return []
        rows = np.unique(np.concatenate([starts, ends]))
        vecs = self.index.vectors(rows)
        start_scores_by_row = vecs @ qs
        end_scores_by_row = vecs @ qe
        s_scores = start_scores_by_row[np.searchsorted(rows, starts)]
        e_scores = end_scores_by_row[np.searchsorted(rows, ends)]
        scores = s_scores + e_scores
        pairs = np.unique(np.stack([starts, ends], axis=1), axis=0, return_index=True)[1]
        starts, ends, scores, s_scores, e_scores = (a[pairs] for a in (starts, ends, scores, s_scores, e_scores))
        # Keep, for each start hit, its best end and, for each end hit, its best start.
        chosen = set()
        chosen |= argmax_groups(starts, scores, np.isin(starts, start_ids))
        chosen |= argmax_groups(ends, scores, np.isin(ends, end_ids))
        idx = np.fromiter(chosen, dtype=np.int64)
        return [(float(scores[i]), int(starts[i]), int(ends[i]), float(s_scores[i]), float(e_scores[i])) for i in idx]


def _passage_window(index: PhraseIndex, model) -> int | None:
    """The passage window (subwords) of the model, or of the one the index records; None when neither says."""
    config = getattr(model, "config", None)
    window = getattr(config, "max_passage_length", None)
    if window is None:
        recorded = index.manifest.get("model_config")
        window = recorded.get("max_passage_length") if isinstance(recorded, dict) else None
    return window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None


def _make_phrase(
    index: PhraseIndex,
    score: float,
    s: int,
    e: int,
    s_score: float,
    e_score: float,
    trim: bool = False,
    span: tuple[int, int] | None = None,
) -> PhraseHit:
    """The phrase of token rows ``s``..``e``; with ``trim`` its text and offsets trimmed (:func:`trim_span`), or at
    ``span`` (char offsets already trimmed: :func:`_answer_span`)."""
    tokens = index.tokens
    row = int(tokens["passage"][s])
    passage = index.passages[row]
    start, end = span or (int(tokens["char_start"][s]), int(tokens["char_end"][e]))
    if trim and span is None:
        start, end = trim_span(passage["text"], start, end)
    return PhraseHit(
        text=passage["text"][start:end],
        score=score,
        passage_id=passage["id"],
        document_id=passage["document_id"],
        title=passage.get("title", ""),
        start=start,
        end=end,
        start_score=s_score,
        end_score=e_score,
        start_token=int(tokens["position"][s]),
        end_token=int(tokens["position"][e]),
        passage_row=row,
    )


def _answer_span(index: PhraseIndex, s: int, e: int) -> tuple[int, int] | None:
    """The trimmed char offsets of the phrase of token rows ``s``..``e``, None when it holds no letter or digit once
    trimmed (markup and punctuation only: no answer; :func:`answer_span`)."""
    tokens = index.tokens
    text = index.passages[int(tokens["passage"][s])]["text"]
    return answer_span(text, int(tokens["char_start"][s]), int(tokens["char_end"][e]))


def _ranked(index: PhraseIndex, phrases: list[tuple[float, int, int, float, float]]) -> list[tuple]:
    """Phrases sorted by score, ties broken by passage row and token rows (deterministic)."""
    tokens = index.tokens
    return sorted(phrases, key=lambda p: (-p[0], int(tokens["passage"][p[1]]), p[1], p[2]))


def _phrase_answers(
    index: PhraseIndex,
    phrases: list[tuple[float, int, int, float, float]],
    top_k: int,
    words: Sequence[str] | None,
    calibration: Calibration | None,
    tidy: bool = False,
    asked: Sequence[str] | None = None,
    by_confidence: bool = False,
    searched: int = 0,
    written: Callable[[Sequence[str]], bool] | None = None,
) -> list[Hit]:
    """The top-k phrase answers, skipping copies of the question (``words``), with confidences (given the
    ``searched`` passages the search could return, when the calibration has an answerability); with ``tidy``
    trimmed and folded (an answer repeating a better one is left out), the confidences computed over the unfolded
    candidates. With ``by_confidence`` the candidates fold most confident first (each answer is the most confident of
    those it folds, as the calibration picks top answers) and come out most confident first; when that folds the
    candidates into fewer than top-k answers, the next candidates by score are added one at a time until it does not
    (or the phrases run out), so that a search never asks the index for more phrases it would fold the same way."""
    depth = calibration.depth if calibration is not None else 0
    kept: list[PhraseHit] = []  # the ranked candidates that do not copy the question
    chosen: list[int] = []  # positions in ``kept`` of the answers by score
    folder = AnswerFolder() if tidy else None
    pending = iter(_ranked(index, phrases))

    def next_candidate() -> PhraseHit | None:
        """The next ranked phrase that does not copy the question (nor, with ``tidy``, is markup and punctuation
        only), added to ``kept``; None when none is left."""
        for p in pending:
            span = _answer_span(index, p[1], p[2]) if tidy else None
            if tidy and span is None:
                continue
            hit = _make_phrase(index, *p, span=span)
            if words is None or not copies_question(hit.text, words):
                kept.append(hit)
                return hit
        return None

    while not (len(chosen) == top_k and len(kept) >= depth) and (hit := next_candidate()) is not None:
        if len(chosen) < top_k and (folder is None or folder.keep(hit.text, hit.passage_row, hit.start, hit.end)):
            chosen.append(len(kept) - 1)
    if calibration is None or not chosen:
        return [kept[i] for i in chosen]
    passage_words = cached_words(index)  # one reader for the first confidences and each candidate added after
    judged = CorpusJudgement()  # the query's corpus judgement, set from the first confidences (judge_corpus)

    def confident(rows: Sequence[int]) -> dict[int, float]:
        found = answer_confidences(calibration, kept, rows, asked, index.passages, passage_words)
        return {row: shifted(c, judged.shift) for row, c in zip(rows, found.tolist(), strict=True)}

    def answers(rows: Sequence[int]) -> list[Hit]:
        judgement = {"holds_answer": judged.holds_answer, "unwritten_names": judged.unwritten_names}
        return [replace(kept[i], confidence=float(confidence[i]), **judgement) for i in rows]

    confidence = confident(range(len(kept)) if by_confidence else chosen)
    judged = judge_corpus(calibration, kept, confidence, asked, index.passages, searched, passage_words, written)
    confidence = {row: shifted(c, judged.shift) for row, c in confidence.items()}
    if not by_confidence:
        return answers(chosen)
    # most confident first; equals keep the score order (``confidence`` is in score order)
    chosen = first_answers(kept, sorted(confidence, key=lambda i: -confidence[i]), top_k, tidy)
    while len(chosen) < top_k and next_candidate() is not None:  # one more candidate by score at a time
        confidence.update(confident([len(kept) - 1]))  # below the reference list: the list stays the same
        chosen = first_answers(kept, sorted(confidence, key=lambda i: -confidence[i]), top_k, tidy)
    return answers(chosen)


def _by_confidence(hits: list[Hit]) -> list[Hit]:
    """Hits ordered by their answer's confidence (a copy of the question counts 0); ties keep their order. Their
    scores stay the phrase scores they had (raw scores then need not decrease down the list)."""

    def confidence(hit: Hit) -> float:
        phrase = best_phrase(hit)
        return float(phrase.confidence) if phrase.confidence is not None and not phrase.copies_question else 0.0

    return sorted(hits, key=lambda hit: -confidence(hit))


def _aggregate(
    index: PhraseIndex,
    phrases: list[tuple[float, int, int, float, float]],
    unit: str,
    top_k: int,
    scoring: str = "max",
    words: Sequence[str] | None = None,
    calibration: Calibration | None = None,
    trim: bool = False,
    asked: Sequence[str] | None = None,
    most_confident: bool = False,
    searched: int = 0,
    written: Callable[[Sequence[str]], bool] | None = None,
) -> list[Hit]:
    """The top-k passages or documents: each scored by its best phrase (``max``) or the log-sum-exp of all of its
    phrases' scores (``logsumexp``), carrying as its answer its best phrase that does not copy the question
    (``words``; with ``most_confident``, its most confident one), with the confidence that phrase has among the
    ranked phrase answers (:func:`_phrase_answers`; ``searched`` as there), its text trimmed with ``trim``; ties broken
    deterministically."""
    tokens = index.tokens
    best: dict[str, tuple] = {}  # key -> its best phrase (the first in the deterministic phrase order)
    answer: dict[str, int] = {}  # passage id -> position in ``answers`` of its best phrase that is no copy
    answers: list[PhraseHit] = []  # the phrase answers, ranked: the phrases that do not copy the question
    scores: dict[str, list[float]] = {}
    for p in _ranked(index, phrases):
        row = int(tokens["passage"][p[1]])
        passage = index.passages[row]
        key = passage["id"] if unit == "passage" else passage["document_id"]
        best.setdefault(key, p)
        scores.setdefault(key, []).append(p[0])
        needed = passage["id"] not in answer or (calibration is not None and len(answers) < calibration.depth)
        if needed and (words is not None or calibration is not None):
            hit = _make_phrase(index, *p, trim=trim)
            if words is None or not copies_question(hit.text, words):
                answer.setdefault(passage["id"], len(answers))
                answers.append(hit)
    if scoring == "logsumexp":
        totals = {key: float(np.logaddexp.reduce(np.asarray(v, dtype=np.float64))) for key, v in scores.items()}
    else:
        totals = {key: v[0] for key, v in scores.items()}
    order = sorted(best, key=lambda key: -totals[key])[:top_k]  # stable: ties keep the best phrases' order
    # a document answers from its best passage, the passage of its best phrase
    answering = {key: index.passages[int(tokens["passage"][best[key][1]])]["id"] for key in order}
    confidence: dict[int, float] = {}
    judged = CorpusJudgement()
    if calibration is not None and answers:
        at = sorted({answer[p] for p in answering.values() if p in answer})  # the answers of the results
        at = sorted({*at, *range(min(len(answers), calibration.depth))}) if most_confident else at  # and the ranked
        words_of = cached_words(index)
        found = answer_confidences(calibration, answers, at, asked, index.passages, words_of)
        confidence = dict(zip(at, found.tolist(), strict=True))
        judged = judge_corpus(calibration, answers, confidence, asked, index.passages, searched, words_of, written)
        confidence = {i: shifted(c, judged.shift) for i, c in confidence.items()}
        for i in at if most_confident else ():  # a passage answers with its most confident phrase
            pid = index.passages[answers[i].passage_row]["id"]
            answer[pid] = i if confidence[i] > confidence[answer[pid]] else answer[pid]
    out: list[Hit] = []
    for key in order:
        if answering[key] in answer:
            at_key = answer[answering[key]]
            phrase = replace(
                answers[at_key],
                confidence=confidence.get(at_key),
                holds_answer=judged.holds_answer,
                unwritten_names=judged.unwritten_names,
            )
        else:  # every retrieved phrase of it copies the question (or no answers were asked for)
            phrase = _make_phrase(index, *best[key], trim=trim)
            copy = words is not None  # a copy is never the answer: confidence 0 where there are confidences
            phrase = replace(phrase, copies_question=copy, confidence=0.0 if copy and calibration else None)
        passage = index.passages[phrase.passage_row]
        hit = PassageHit(
            passage["id"],
            passage["document_id"],
            passage.get("title", ""),
            passage["text"],
            totals[key],
            phrase,
            dict(passage.get("meta") or {}),
        )
        if unit == "document":
            hit = DocumentHit(passage["document_id"], passage.get("title", ""), totals[key], hit)
        out.append(hit)
    return out


# The hit types live in :mod:`dphr_haystack.hits`; they are imported from here too.
__all__ = [
    "RANKING_POOL",
    "DocumentHit",
    "Hit",
    "PassageHit",
    "PhraseHit",
    "PhraseSearcher",
    "best_passage",
    "best_phrase",
]
