"""How often a question names something no passage of the corpus writes, as the searcher compares names.

    .venv/bin/python -m benchmarks.quality.unwritten_names

Over the 1,702 SQuAD dev-public paragraphs: SQuAD dev's own questions (each answered by one of them), and NQ-open /
TriviaQA dev questions (nearly all unanswerable there); over the user corpus (``benchmarks/data/user_corpus``): its
answerable questions, near misses and questions about another entity. For each, the share of questions with a name
(:func:`dphr_haystack.question_words.question_names`) that no passage writes, compared as the searcher compares them
(:func:`~dphr_haystack.question_words.name_key`: accents dropped, a dash read as a hyphen) and as plain SQuAD
normalisation would, with examples. Writes results/unwritten_names.json.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from benchmarks.answerability_cases import OPEN_SETS, USER_CORPUS, open_questions
from benchmarks.common import SQUAD_DEV, machine, write_result

EXAMPLES = 12


def plain_words(records: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """How many records write each word under plain SQuAD normalisation (accents and dashes as written)."""
    from dphr_haystack.answers import normalize_answer

    counts: Counter[str] = Counter()
    for r in records:
        counts.update(set(normalize_answer(f"{str(r.get('title') or '').replace('_', ' ')} {r['text']}").split()))
    return counts


def plain_names(question: str) -> tuple[str, ...]:
    """A question's names keyed by plain SQuAD normalisation, as they were compared before accents were folded."""
    from dphr_haystack.answers import normalize_answer
    from dphr_haystack.question_words import question_name_spellings

    return tuple(normalize_answer(w).replace(" ", "") for w in question_name_spellings(question).values())


def unwritten_share(
    questions: Sequence[str], names: Callable[[str], tuple[str, ...]], counts: Counter[str]
) -> dict[str, Any]:
    """The share of ``questions`` with a name that no counted passage writes, and the first of them."""
    from dphr_haystack.question_words import holds_name

    missing = [q for q in questions if any(not holds_name(lambda w: counts[w] > 0, n) for n in names(q))]
    return {
        "questions": len(questions),
        "with_unwritten_name": len(missing),
        "share": len(missing) / len(questions) if questions else None,
        "examples": missing[:EXAMPLES],
    }


def main() -> None:
    from dphr_haystack.corpus_words import words_of
    from dphr_haystack.question_words import question_names
    from train.data import load_squad

    started = time.perf_counter()
    squad = load_squad(SQUAD_DEV)
    user = [json.loads(line) for line in (USER_CORPUS / "passages.jsonl").read_text().splitlines() if line.strip()]
    asked = [json.loads(line) for line in (USER_CORPUS / "questions.jsonl").read_text().splitlines() if line.strip()]
    own = list(dict.fromkeys(ex.question for ex in squad.examples))
    sets: dict[str, tuple[list[str], list[dict]]] = {"squad-dev over its 1,702 paragraphs": (own, squad.passages)}
    for name, path in OPEN_SETS.items():
        if path.is_file():
            found = [q.question for q in open_questions(path, 600, 0)]
            sets[f"{name} (600) over the 1,702 paragraphs"] = (found, squad.passages)
    kinds = {"answerable": [q for q in asked if q["answerable"]]}
    kinds |= {k: [q for q in asked if q["kind"] == k] for k in ("near", "other-entity")}
    for kind, found in kinds.items():
        sets[f"user corpus: {kind}"] = ([q["question"] for q in found], user)
    rows = {}
    for label, (questions, passages) in sets.items():
        rows[label] = {
            "compared as the searcher does": unwritten_share(questions, question_names, words_of(passages)),
            "plain SQuAD normalisation": unwritten_share(questions, plain_names, plain_words(passages)),
        }
        shares = " / ".join(f"{100 * v['share']:.2f}%" for v in rows[label].values())
        print(f"{label}: with a name no passage writes, as compared now / plainly: {shares}")
    result = {
        "machine": machine(),
        "command": ".venv/bin/python -m benchmarks.quality.unwritten_names",
        "sets": rows,
        "seconds": time.perf_counter() - started,
    }
    print(f"wrote {write_result('unwritten_names', result)}")


if __name__ == "__main__":
    main()
