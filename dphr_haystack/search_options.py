"""The one search contract: every option of a phrase search, with its name, default and check, in one place.

Every front end builds a :class:`PhraseSearchOptions` and nothing else: :class:`~dphr_haystack.search.PhraseSearcher`,
both document stores' ``search_phrases``, the Haystack 1.x and Haystack 2 ``PhraseRetriever`` (init values, then the
per-query values of ``run``), ``dphr search`` and the REST server (through the 1.x retriever's ``run``). A front end's
signature names each option as this class does, with the same default; the tests compare them. What is not a search
option stays with the front end that needs it: the model and the device (a string in Haystack 1.x, a
``ComponentDevice`` in Haystack 2, each Haystack's convention), the indexing ``filter_threshold`` (1.x retriever,
which also encodes), ``return_answers`` (1.x pipelines), ``filters`` / ``filter_policy`` and ``encode_missing``
(Haystack 2's conventions), ``--json`` / ``--raw-scores`` (the command line).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from ._util.threads import check_threads
from .errors import InvalidParameterError
from .params import check_choice, check_param, check_probability, check_query_precision

if TYPE_CHECKING:
    from .model.calibration import Calibration

# P(the corpus holds an answer) below which a search that asks for it answers "no answer" first (a calibration's
# holds_answer; without one, the top answer's confidence stands for it) when neither the search nor the model's
# calibration names a threshold (:func:`no_answer_threshold`). Chosen on the holds-answer's own fit cases
# (validation-article questions over 5 to 20,598 passages with and without their article): the largest threshold in
# steps of 0.05 at which no corpus size loses more than 5% of its right top answers (at most 4.7%, at 20,598
# passages; 0.45 would lose 6.1% at 500), turning away 81-98% of each size's unanswerable questions (the sweep of
# benchmarks/results/holds_answer_fit.json). Measured on unseen questions: benchmarks/quality/answerability.py
# (docs/scores.md).
NO_ANSWER_THRESHOLD = 0.4

UNITS = ("phrase", "passage", "document")
# How a passage or document scores its retrieved phrases: the best one (Lee et al. 2021b) or all of them.
PASSAGE_SCORINGS = ("max", "logsumexp")
# How results are ordered: by the calibrated confidence of their answer (a model with a calibration; else by score)
# or by score alone (DensePhrases' order).
RANKINGS = ("confidence", "score")


def check_unit(unit: str) -> str:
    """``unit`` if it is one of :data:`UNITS`, else InvalidParameterError."""
    if unit not in UNITS:
        raise InvalidParameterError(f"unknown retrieval unit {unit!r}; valid units: {', '.join(UNITS)}")
    return unit


def check_passage_scoring(scoring: str) -> str:
    """``scoring`` if it is one of :data:`PASSAGE_SCORINGS`, else InvalidParameterError."""
    return check_choice("passage_scoring", scoring, PASSAGE_SCORINGS)


def check_ranking(ranking: str) -> str:
    """``ranking`` if it is one of :data:`RANKINGS`, else InvalidParameterError."""
    return check_choice("ranking", ranking, RANKINGS)


def check_flag(name: str, value: Any) -> bool:
    """``value`` when it is a bool, else InvalidParameterError naming ``name``."""
    if not isinstance(value, bool):
        raise InvalidParameterError(f"{name}={value!r}; valid: true or false")
    return value


def check_truecase(value: Any) -> bool | None:
    """The ``truecase`` option: True, False or None (follow the model's setting)."""
    if value is not None and not isinstance(value, bool):
        raise InvalidParameterError(f"truecase={value!r}; valid: true, false or null (the model's)")
    return value


def check_no_answer_threshold(threshold: Any) -> float:
    """``threshold`` as a float if it is a number in [0, 1]; InvalidParameterError otherwise."""
    return check_probability("no_answer_threshold", threshold)


@dataclass(frozen=True)
class PhraseSearchOptions:
    """What a phrase search is asked for; every value is checked on construction (InvalidParameterError).

    Args:
        unit: ``passage`` (top-k passages by their best phrase), ``phrase`` (top-k phrase answers) or ``document``
            (top-k documents by their best passage).
        top_k: Results per query.
        max_answer_length: Longest phrase in subwords, 1 to 512 and at most the model's passage window (None: the
            model's).
        whole_words: Phrases start and end on word boundaries (never inside a WordPiece-split word).
        skip_question_copies: Never answer with a phrase the question itself contains ("Who won Super Bowl 50?" →
            "Super Bowl 50"), in every unit; passage and document rankings and scores are unchanged by it.
        truecase: Truecase all-lowercase queries before encoding them (DensePhrases' ``--truecase``), from the case
            of the indexed passages; None follows the model (on for cased DensePhrases checkpoints).
        passage_scoring: How passages and documents score their retrieved phrases: ``max`` (the best one, Lee et
            al. 2021b) or ``logsumexp`` (all of them).
        ranking: ``confidence``: the first results by score (as many phrase answers as the calibration's depth, 50
            for the shipped default; 10 passages or documents) are ordered by their answer's calibrated confidence;
            ``score``: by score alone (DensePhrases). A model without a calibration ranks by score.
        query_precision: ``int8``: queries are encoded on the CPU by an int8 copy of the query side, in about half
            the time of ``float32`` (DensePhrases' way, and always on a GPU), with the same EM on the shipped model.
        batch_size: Queries encoded at once.
        threads: torch/FAISS intra-op threads a search runs on (None: ``$DPHR_THREADS``, else 1, fastest when several
            queries run at once; :mod:`dphr_haystack._util.threads`).
        scale_score: Results scored in [0, 1] (an answer's calibrated confidence, or expit(score / 100) without a
            calibration) or raw phrase scores (for min-max fusion); :mod:`dphr_haystack.documents.results`.
        no_answer: Also give "no answer", scored 1 − P(the corpus holds an answer) (the calibration's
            ``holds_answer``; without one, the top answer's confidence stands for it): first when that probability
            is below ``no_answer_threshold``, last otherwise (needs a model with a calibration).
        no_answer_threshold: P(the corpus holds an answer) below which "no answer" comes first, in [0, 1]; None:
            the model's for the search (its verification's with ``verify``; the shipped default's: 0.4 with and
            without ``verify``), else :data:`NO_ANSWER_THRESHOLD` (:func:`no_answer_threshold`).
        verify: A question-answering reader reads each query's top answer in its passage, and every answer's
            confidence moves so that the top answer's is P(right) given the reader's view too (one reader pass a
            query; needs a model whose calibration has a verification, as the shipped default's does;
            :mod:`dphr_haystack.verification`).
    """

    unit: str = "passage"
    top_k: int = 10
    max_answer_length: int | None = None
    whole_words: bool = True
    skip_question_copies: bool = True
    truecase: bool | None = None
    passage_scoring: str = "max"
    ranking: str = "confidence"
    query_precision: str = "int8"
    batch_size: int = 32
    threads: int | None = None
    scale_score: bool = True
    no_answer: bool = False
    no_answer_threshold: float | None = None
    verify: bool = False

    def __post_init__(self) -> None:
        check_unit(self.unit)
        check_param("top_k", self.top_k)
        if self.max_answer_length is not None:
            check_param("max_answer_length", self.max_answer_length)
        for name in ("whole_words", "skip_question_copies", "scale_score", "no_answer", "verify"):
            check_flag(name, getattr(self, name))
        check_truecase(self.truecase)
        check_passage_scoring(self.passage_scoring)
        check_ranking(self.ranking)
        check_query_precision(self.query_precision)
        check_param("batch_size", self.batch_size)
        check_threads(self.threads)
        if self.no_answer_threshold is not None:
            object.__setattr__(self, "no_answer_threshold", check_no_answer_threshold(self.no_answer_threshold))

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> PhraseSearchOptions:
        """The options among ``params`` (a front end's arguments; other names are not options and are left out)."""
        return cls(**{name: params[name] for name in SEARCH_OPTION_NAMES if name in params})

    def replaced(self, **values: Any) -> PhraseSearchOptions:
        """These options with ``values`` in place of theirs (checked; unknown names raise InvalidParameterError)."""
        unknown = sorted(set(values) - set(SEARCH_OPTION_NAMES))
        if unknown:
            valid = ", ".join(SEARCH_OPTION_NAMES)
            raise InvalidParameterError(f"not a search option: {', '.join(unknown)}; valid: {valid}")
        return replace(self, **values) if values else self

    def updated(self, **values: Any) -> PhraseSearchOptions:
        """A query's options: these with each of ``values`` that is not None in place of theirs (None keeps one)."""
        return self.replaced(**{name: value for name, value in values.items() if value is not None})

    def to_params(self) -> dict[str, Any]:
        """Every option as JSON-ready ``{name: value}`` (what front ends serialise, and ``from_params`` reads)."""
        return asdict(self)


def no_answer_threshold(options: PhraseSearchOptions, calibration: Calibration | None) -> float:
    """The threshold a search with ``options`` places "no answer" by: the options' own, else the one ``calibration``
    documents for the search (:meth:`~dphr_haystack.model.calibration.Calibration.documented_no_answer_threshold`:
    its verification's with ``verify``), else :data:`NO_ANSWER_THRESHOLD`."""
    if options.no_answer_threshold is not None:
        return options.no_answer_threshold
    documented = calibration.documented_no_answer_threshold(options.verify) if calibration is not None else None
    return NO_ANSWER_THRESHOLD if documented is None else documented


SEARCH_OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in fields(PhraseSearchOptions))
DEFAULT_SEARCH_OPTIONS = PhraseSearchOptions()


class SearchOptionAttributes:
    """Mixin of the front ends that hold a ``search_options``: each option reads and writes as an attribute of its
    own (``retriever.top_k``, ``retriever.top_k = 5``); a written value is checked and replaces the options."""

    search_options: PhraseSearchOptions

    def __getattr__(self, name: str) -> Any:
        options = self.__dict__.get("search_options")
        if options is not None and name in SEARCH_OPTION_NAMES:
            return getattr(options, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in SEARCH_OPTION_NAMES and "search_options" in self.__dict__:
            object.__setattr__(self, "search_options", replace(self.search_options, **{name: value}))
        else:
            super().__setattr__(name, value)


__all__ = [
    "DEFAULT_SEARCH_OPTIONS",
    "NO_ANSWER_THRESHOLD",
    "PASSAGE_SCORINGS",
    "PhraseSearchOptions",
    "RANKINGS",
    "SEARCH_OPTION_NAMES",
    "SearchOptionAttributes",
    "UNITS",
    "check_flag",
    "check_no_answer_threshold",
    "check_passage_scoring",
    "check_ranking",
    "check_truecase",
    "check_unit",
    "no_answer_threshold",
]
