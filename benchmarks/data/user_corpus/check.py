"""Consistency check for the user-corpus test set (stdlib only).

Run from the repository root:

    python3 benchmarks/data/user_corpus/check.py

Prints a summary and exits 0 when everything holds; otherwise prints one line
per problem and exits 1.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOPICS = {"town": range(1, 9), "company": range(9, 17), "plant": range(17, 25)}
ANSWERABLE_KINDS = {"who", "when", "where", "how many", "what"}
UNANSWERABLE_KINDS = ("general", "near", "other-entity")
QUESTION_KEYS = {"id", "question", "answers", "answerable", "passage_id", "kind"}


def load(name: str, problems: list[str]) -> list[dict]:
    rows = []
    for n, line in enumerate((HERE / name).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            problems.append(f"{name}:{n}: blank line")
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            problems.append(f"{name}:{n}: bad JSON ({e})")
    return rows


def topic_of(pid: str) -> str | None:
    m = re.fullmatch(r"uc-(\d\d)", pid or "")
    if not m:
        return None
    for topic, numbers in TOPICS.items():
        if int(m.group(1)) in numbers:
            return topic
    return None


def words(s: str) -> list[str]:
    return re.findall(r"[\w'-]+", s.lower())


def main() -> int:
    problems: list[str] = []
    passages = load("passages.jsonl", problems)
    questions = load("questions.jsonl", problems)

    # passages
    by_id: dict[str, dict] = {}
    for p in passages:
        pid = p.get("id")
        if set(p) != {"id", "title", "text"}:
            problems.append(f"passage {pid}: keys {sorted(p)}")
        if pid in by_id:
            problems.append(f"passage {pid}: duplicate id")
        by_id[pid] = p
        if topic_of(pid) is None:
            problems.append(f"passage {pid}: id not uc-01..uc-24")
        n = len(p.get("text", "").split())
        if not 80 <= n <= 160:
            problems.append(f"passage {pid}: {n} words (want 80-160)")
    if len(passages) != 24:
        problems.append(f"{len(passages)} passages (want 24)")
    per_topic = Counter(topic_of(pid) for pid in by_id)
    for topic in TOPICS:
        if per_topic[topic] != 8:
            problems.append(f"topic {topic}: {per_topic[topic]} passages (want 8)")
    titles = Counter(p.get("title") for p in passages)
    problems += [f"title used twice: {t}" for t, c in titles.items() if c > 1]

    # questions
    seen_ids: set[str] = set()
    seen_text: set[str] = set()
    answerable_topics: Counter = Counter()
    unanswerable_kinds: Counter = Counter()
    for q in questions:
        qid = q.get("id")
        if set(q) != QUESTION_KEYS:
            problems.append(f"question {qid}: keys {sorted(q)}")
        if qid in seen_ids:
            problems.append(f"question {qid}: duplicate id")
        seen_ids.add(qid)
        text = q.get("question", "").strip().lower()
        if text in seen_text:
            problems.append(f"question {qid}: duplicate question text")
        seen_text.add(text)
        if q.get("answerable") is True:
            pid = q.get("passage_id")
            if pid not in by_id:
                problems.append(f"question {qid}: passage_id {pid!r} not a passage")
                continue
            answerable_topics[topic_of(pid)] += 1
            if q.get("kind") not in ANSWERABLE_KINDS:
                problems.append(f"question {qid}: kind {q.get('kind')!r}")
            answers = q.get("answers")
            if not isinstance(answers, list) or not answers:
                problems.append(f"question {qid}: no answers")
                continue
            passage = by_id[pid]["text"]
            for a in answers:
                if not isinstance(a, str) or not a or a not in passage:
                    problems.append(f"question {qid}: answer {a!r} not verbatim in {pid}")
            if len(set(answers)) != len(answers):
                problems.append(f"question {qid}: repeated answer")
            # the question must not copy a long run of the passage word for word
            qw, pw = words(q["question"]), " ".join(words(passage))
            for i in range(len(qw) - 5):
                run = " ".join(qw[i : i + 6])
                if f" {run} " in f" {pw} ":
                    problems.append(f"question {qid}: copies '{run}' from {pid}")
                    break
        elif q.get("answerable") is False:
            unanswerable_kinds[q.get("kind")] += 1
            if q.get("answers") != []:
                problems.append(f"question {qid}: unanswerable but answers={q.get('answers')!r}")
            if q.get("passage_id") is not None:
                problems.append(f"question {qid}: unanswerable but passage_id set")
            if q.get("kind") not in UNANSWERABLE_KINDS:
                problems.append(f"question {qid}: kind {q.get('kind')!r}")
        else:
            problems.append(f"question {qid}: answerable must be true or false")

    n_ans = sum(answerable_topics.values())
    n_un = sum(unanswerable_kinds.values())
    if n_ans != 48:
        problems.append(f"{n_ans} answerable questions (want 48)")
    for topic in TOPICS:
        if answerable_topics[topic] != 16:
            problems.append(f"topic {topic}: {answerable_topics[topic]} answerable (want 16)")
    if n_un != 48:
        problems.append(f"{n_un} unanswerable questions (want 48)")
    for kind in UNANSWERABLE_KINDS:
        if unanswerable_kinds[kind] != 16:
            problems.append(f"kind {kind}: {unanswerable_kinds[kind]} unanswerable (want 16)")

    if problems:
        print("\n".join(problems))
        return 1
    print(
        f"ok: {len(passages)} passages ({', '.join(f'{t} {per_topic[t]}' for t in TOPICS)}); "
        f"{len(questions)} questions: {n_ans} answerable "
        f"({', '.join(f'{t} {answerable_topics[t]}' for t in TOPICS)}), {n_un} unanswerable "
        f"({', '.join(f'{k} {unanswerable_kinds[k]}' for k in UNANSWERABLE_KINDS)}); "
        f"all answers verbatim in their passages"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
