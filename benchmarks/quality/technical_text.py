"""Technical text: phrase answers on documentation nobody on the project wrote, its markup left in.

    nice -n 5 .venv/bin/python -m benchmarks.quality.technical_text [--record after] [--tidy both|current|raw]
    .venv/bin/python -m benchmarks.quality.technical_text --check        # build the corpus, verify the questions
    .venv/bin/python -m benchmarks.quality.technical_text --dump F.jsonl # the passages, to read when writing questions

The corpus is the reStructuredText sources of the Python 3.11 documentation as Debian's ``python3.11-doc`` installs
them (the tutorial and the library pages of common modules) plus the markdown READMEs of a few permissively licensed
packages installed in the environment (their ``METADATA``), cut into passages of about 100-180 words on paragraph
boundaries, the markup kept as the source has it (``literal``, *emphasis*, **strong**, :func:`roles`, links): what a
user who indexes their own rst or markdown documentation gets. Only what no reader sees is dropped: section
adornment lines, comments, link targets and the ``index`` / ``module`` / ``highlight``-like directives. The
questions (``benchmarks/data/technical_docs/questions.jsonl``) were written by hand from the passages; every
answer is checked to occur in its passage, free of markup, before anything runs.

The corpus is indexed in memory with the model's filter and every question asked (phrase answers, top 5) with
the tidy answers of the code as it stands and the raw DensePhrases spans (``tidy_answers=False``). Reported per
setting: EM@1, F1@1, EM@5 (SQuAD normalisation), how often the top answer's passage holds an answer, the mean
confidence of right and wrong top answers and its AUROC, how many top-1 and top-5 answers still hold markup
(:func:`markup_marks`), answer lengths, how often a wrong top answer contains a right one (too long) or lies
within one (too short), and the first wrong answers. ``--record NAME`` stores the run under that name beside the
runs recorded before it in results/technical_text.json (``before``: the code before a change, ``after``: with it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import DEFAULT_MODEL, RESULTS, ROOT, finish_result, machine, model_id, pyplot, save_figure

DOCS = Path("/usr/share/doc/python3.11/html/_sources")
DATA = ROOT / "benchmarks" / "data" / "technical_docs"
QUESTIONS = DATA / "questions.jsonl"
SITE_PACKAGES = ROOT / ".venv" / "lib" / "python3.11" / "site-packages"
# The library pages: common modules of the standard library, in this order.
LIBRARY = (
    "os.path pathlib json csv re string textwrap datetime time zoneinfo calendar collections itertools functools "
    "operator heapq bisect copy pprint random statistics math secrets uuid hashlib base64 shutil glob fnmatch "
    "tempfile zipfile tarfile gzip pickle sqlite3 subprocess shlex argparse logging warnings traceback "
    "dataclasses enum abc contextlib io sys platform getpass venv timeit asyncio-task threading queue sched "
    "concurrent.futures urllib.parse http.server configparser tomllib difflib array weakref"
).split()
# Markdown READMEs shipped in package metadata: (distribution directory prefix, licence as the package states it).
READMES = (
    ("rich", "MIT"),
    ("httpx", "BSD-3-Clause"),
    ("fastapi", "MIT"),
    ("attrs", "MIT"),
    ("urllib3", "MIT"),
    ("uvicorn", "BSD-3-Clause"),
    ("click", "BSD-3-Clause"),
    ("requests", "Apache-2.0"),
    ("faiss_cpu", "MIT"),
    ("huggingface_hub", "Apache-2.0"),
    ("tiktoken", "MIT"),
    ("platformdirs", "MIT"),
    ("cattrs", "MIT"),
    ("pandas", "BSD-3-Clause"),
)
MIN_WORDS, MAX_WORDS, HARD_MAX_WORDS, MERGE_BELOW = 100, 180, 260, 40
TOP_K = 5
WRONG_SHOWN = 20

# ----------------------------------------------------------------------------- the corpus

_ADORNMENT = re.compile(r"^([=\-`:'\"~^_*+#<>.])\1{2,}\s*$")
_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([\w:-]+)::")
_EXPLICIT = re.compile(r"^(\s*)\.\.(?:\s|$)")
_LABEL = re.compile(r"^\s*\.\.\s+_[^:]*:")
_KEPT_EXPLICIT = re.compile(r"^\s*\.\.\s+(?:\[|\|)")  # footnotes and substitution definitions stay
# Directives no reader sees as text (index entries, module metadata, highlighting, hidden test code).
_HIDDEN = frozenset(
    "index module moduleauthor sectionauthor highlight currentmodule toctree testsetup testcleanup audit-event "
    "include raw only tabularcolumns".split()
)
_ROLE_IN_TITLE = re.compile(r":[\w:.+-]+:`[!~]?([^`]*)`")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _rst_lines(text: str) -> tuple[list[str], set[int]]:
    """The lines of an rst page a reader sees, markup kept, and which of them are section titles: adornment lines,
    comments, link targets and hidden directives (each with its indented body) are dropped."""
    source = [line.rstrip() for line in text.splitlines()]
    kept: list[str] = []
    headings: set[int] = set()
    i = 0
    while i < len(source):
        line = source[i]
        directive = _DIRECTIVE.match(line)
        hidden = (directive and directive.group(2) in _HIDDEN) or (
            _EXPLICIT.match(line) and not directive and not _KEPT_EXPLICIT.match(line) and not _LABEL.match(line)
        )
        if hidden:  # the block: every following line indented deeper, or blank
            depth = _indent(line)
            i += 1
            while i < len(source) and (not source[i].strip() or _indent(source[i]) > depth):
                i += 1
            continue
        if _LABEL.match(line):
            i += 1
            continue
        if _ADORNMENT.match(line):
            previous = len(kept) - 1
            if previous >= 0 and kept[previous].strip() and previous not in headings:
                headings.add(previous)  # an underline: the line above is a title
            i += 1
            continue
        kept.append(line)
        i += 1
    return kept, headings


def _blocks(lines: Sequence[str], headings: set[int] | None = None) -> list[tuple[str, bool]]:
    """Paragraphs (lines between blank lines) and whether each begins with a section title."""
    out: list[tuple[str, bool]] = []
    current: list[str] = []
    starts_heading = False
    for i, line in enumerate(lines):
        if not line.strip():
            if current:
                out.append(("\n".join(current), starts_heading))
            current, starts_heading = [], False
            continue
        if not current:
            starts_heading = bool(headings and i in headings) or line.startswith("#")
        current.append(line)
    if current:
        out.append(("\n".join(current), starts_heading))
    return out


def _split_long(paragraph: str) -> list[str]:
    """A paragraph over the word limit cut between lines into pieces within it (a single longer line stays)."""
    if len(paragraph.split()) <= MAX_WORDS:
        return [paragraph]
    pieces, current, words = [], [], 0
    for line in paragraph.split("\n"):
        n = len(line.split())
        if current and words + n > MAX_WORDS:
            pieces.append("\n".join(current))
            current, words = [], 0
        current.append(line)
        words += n
    if current:
        pieces.append("\n".join(current))
    return pieces


def _pack(blocks: Iterable[tuple[str, bool]]) -> list[str]:
    """Paragraphs packed into passages of about MIN_WORDS-MAX_WORDS words; a section title starts a new passage
    once the current one is long enough, and a short last passage joins the one before."""
    passages: list[list[str]] = []
    current: list[str] = []
    words = 0
    for block, heading in blocks:
        for piece in _split_long(block):
            n = len(piece.split())
            full = words + n > MAX_WORDS and words >= MIN_WORDS
            if current and (full or (heading and words >= MIN_WORDS) or words + n > HARD_MAX_WORDS):
                passages.append(current)
                current, words = [], 0
            current.append(piece)
            words += n
            heading = False
    if current:
        if passages and words < MERGE_BELOW and len(" ".join(passages[-1]).split()) + words <= HARD_MAX_WORDS:
            passages[-1].extend(current)
        else:
            passages.append(current)
    return ["\n\n".join(p) for p in passages]


def _rst_title(lines: Sequence[str], headings: set[int], fallback: str) -> str:
    """The page title as a reader sees it: the first section title with roles and literals rendered plainly."""
    for i in sorted(headings):
        title = _ROLE_IN_TITLE.sub(r"\1", lines[i].strip()).replace("``", "").replace("\\ ", "")
        return " ".join(title.replace("---", "-").split())
    return fallback


def _rst_pages() -> list[tuple[str, str, list[tuple[str, bool]]]]:
    """(page, title, paragraphs) of every rst page of the corpus."""
    if not DOCS.is_dir():
        raise SystemExit(f"{DOCS} is missing: install Debian's python3.11-doc (apt-get install python3.11-doc)")
    files = sorted((DOCS / "tutorial").glob("*.rst.txt")) + [DOCS / "library" / f"{m}.rst.txt" for m in LIBRARY]
    pages = []
    for file in files:
        page = str(file.relative_to(DOCS)).removesuffix(".rst.txt")
        if page == "tutorial/index":
            continue  # a table of contents
        lines, headings = _rst_lines(file.read_text(encoding="utf-8"))
        pages.append((page, _rst_title(lines, headings, page), _blocks(lines, headings)))
    return pages


def _readme_pages() -> list[tuple[str, str, list[tuple[str, bool]]]]:
    """(page, title, paragraphs) of each package README (the long description in its METADATA)."""
    pages = []
    for name, _licence in READMES:
        found = sorted(SITE_PACKAGES.glob(f"{name}-*.dist-info/METADATA"))
        if not found:
            raise SystemExit(f"no {name}-*.dist-info/METADATA under {SITE_PACKAGES}")
        header, _, body = found[-1].read_text(encoding="utf-8").partition("\n\n")
        if "Description-Content-Type: text/markdown" not in header:
            raise SystemExit(f"{found[-1]} holds no markdown description")
        title = re.search(r"^Name: (.+)$", header, re.M).group(1).strip()
        lines = [line.rstrip() for line in body.splitlines()]
        pages.append((f"readme/{name}", title, _blocks(lines)))
    return pages


def build_passages() -> list[dict[str, str]]:
    """The corpus, deterministically: ``{"id", "title", "text", "page", "hash"}`` per passage."""
    out = []
    for page, title, blocks in _rst_pages() + _readme_pages():
        for n, text in enumerate(_pack(blocks)):
            digest = hashlib.sha1(text.encode()).hexdigest()[:12]
            out.append({"id": f"{page}#{n}", "title": title, "text": text, "page": page, "hash": digest})
    return out


def corpus_sources() -> dict[str, Any]:
    """Where the corpus comes from: the Debian package's version and each README's package version and licence."""
    import subprocess

    try:
        docs = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", "python3.11-doc"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        docs = None
    readmes = {}
    for name, licence in READMES:
        meta = sorted(SITE_PACKAGES.glob(f"{name}-*.dist-info"))[-1].name
        readmes[name] = {"version": meta.removeprefix(f"{name}-").removesuffix(".dist-info"), "licence": licence}
    return {"python3.11-doc": docs, "pages": ["tutorial/*", *[f"library/{m}" for m in LIBRARY]], "readmes": readmes}


# ----------------------------------------------------------------------------- markup in an answer

_MARKS: dict[str, re.Pattern[str]] = {
    "backtick": re.compile(r"`"),
    "strong": re.compile(r"\*\*"),
    "emphasis": re.compile(r"(?:^|(?<=[\s(\[]))\*(?=[^\s*])|(?<=[^\s*])\*(?=$|[\s).,;:!?\]])"),
    "role": re.compile(r"(?<![\w:]):[A-Za-z][\w.+-]*(?::[A-Za-z][\w.+-]*)?:(?=`|$)"),
    "angle bracket": re.compile(r"<[A-Za-z/!]|[A-Za-z/\"']>"),  # a tag or an autolink's, not "<=" or "a > b"
    "pipe": re.compile(r"\|"),
    "underscore": re.compile(
        r"^_(?=[^_\s])[^\n]*[^_\s]_$|^__(?=\S)[^\n]*\s[^\n]*\S__$|`_+$|^_+(?=\s)|(?<=\s)_+$|^_+$"
    ),
    "directive": re.compile(r"^\.\.\s|::"),
    "link": re.compile(r"\]\("),
}


def markup_marks(text: str) -> list[str]:
    """The kinds of markup that ``text`` still holds: backticks, ``**``, ``*`` emphasising a word, reST role
    prefixes (``:func:``), angle brackets of links or tags, pipes, underscores used as emphasis or as a reST link's
    end (``_word_``, ``__two words__``, `` `link`_ ``; not ``__init__`` nor ``_private``), directive marks (``..``,
    ``::``) and markdown links (``](``)."""
    return [kind for kind, pattern in _MARKS.items() if pattern.search(text)]


# ----------------------------------------------------------------------------- the questions


def _squash(text: str) -> str:
    return " ".join(text.split())


def load_questions(passages: Sequence[dict[str, str]], path: Path = QUESTIONS) -> list[dict[str, Any]]:
    """The questions, each checked against its passage: the passage exists with the recorded hash, and every
    answer is free of markup and occurs in the passage text (whitespace runs read as one space).

    Raises:
        SystemExit: Any question fails a check (all failures are listed).
    """
    by_id = {p["id"]: p for p in passages}
    questions, problems, seen = [], [], set()
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        q = json.loads(line)
        where = f"{path.name}:{n} ({q.get('id')})"
        missing = {"id", "question", "answers", "page", "passage", "hash", "type"} - set(q)
        if missing:
            problems.append(f"{where}: missing {sorted(missing)}")
            continue
        if q["id"] in seen:
            problems.append(f"{where}: repeated id")
        seen.add(q["id"])
        passage = by_id.get(q["passage"])
        if passage is None:
            problems.append(f"{where}: no passage {q['passage']!r}")
            continue
        if passage["hash"] != q["hash"] or passage["page"] != q["page"]:
            problems.append(f"{where}: passage {q['passage']} is now {passage['hash']} on {passage['page']}")
        if not q["answers"]:
            problems.append(f"{where}: no answers")
        text = _squash(passage["text"])
        for answer in q["answers"]:
            if markup_marks(answer):
                problems.append(f"{where}: answer {answer!r} holds markup {markup_marks(answer)}")
            if _squash(answer) not in text:
                problems.append(f"{where}: answer {answer!r} is not in passage {q['passage']}")
        questions.append(q)
    if problems:
        raise SystemExit(f"{len(problems)} problems in {path}:\n" + "\n".join(problems))
    return questions


# ----------------------------------------------------------------------------- the measurements


def _index(model, passages: list[dict[str, str]], cache: Path | None):
    """The corpus indexed in memory (or loaded from / saved to ``cache`` for repeated runs), with its build time."""
    from dphr_haystack import PhraseIndex
    from dphr_haystack.encode.add import add_passages

    records = [{"id": p["id"], "title": p["title"], "text": p["text"]} for p in passages]
    started = time.perf_counter()
    if cache is not None:
        digest = hashlib.sha1(json.dumps(records).encode()).hexdigest()[:12]
        path = cache / f"{model.phrase_fingerprint()[:12]}-{digest}"
        if path.is_dir():
            return PhraseIndex.load(path, model=model), None
    index = PhraseIndex.create(model, filter_threshold=model.config.filter_threshold)
    add_passages(index, model, records, progress=True)
    seconds = time.perf_counter() - started
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        index.save(path)
    return index, seconds


def _longer_or_shorter(text: str, answers: Sequence[str]) -> str | None:
    """``"longer"`` when a wrong answer's normalised words contain a right answer's, ``"shorter"`` when they lie
    within one, else None."""
    from dphr_haystack.answers import normalize_answer

    words = normalize_answer(text).split()
    if not words:
        return None
    for answer in answers:
        gold = normalize_answer(answer).split()
        if not gold:
            continue
        if len(words) > len(gold) and any(words[i : i + len(gold)] == gold for i in range(len(words))):
            return "longer"
        if len(words) < len(gold) and any(gold[i : i + len(words)] == words for i in range(len(gold))):
            return "shorter"
    return None


def score(hits: Sequence[Sequence[Any]], questions: Sequence[dict[str, Any]], texts: dict[str, str]) -> dict[str, Any]:
    """The measures of one setting from its top-k phrase hits per question."""
    from dphr_haystack.answers import exact_match, f1_score
    from dphr_haystack.confidence import auroc

    rows, right, confidence, lengths = [], [], [], {True: [], False: []}
    marked1, marked_k, answers_k, kinds, sides, by_type = 0, 0, 0, Counter(), Counter(), {}
    for q, found in zip(questions, hits, strict=True):
        top = found[0] if found else None
        text = top.text if top else ""
        em = bool(top) and exact_match(text, q["answers"])
        f1 = f1_score(text, q["answers"]) if top else 0.0
        em_k = any(exact_match(h.text, q["answers"]) for h in found)
        passage_ok = bool(top) and any(_squash(a) in _squash(texts[top.passage_id]) for a in q["answers"])
        marks = markup_marks(text) if top else []
        marked1 += bool(marks)
        kinds.update(marks)
        for h in found:
            answers_k += 1
            marked_k += bool(markup_marks(h.text))
        if top is not None:
            right.append(em)
            confidence.append(top.confidence if top.confidence is not None else float("nan"))
            lengths[em].append(len(text.split()))
        side = None if em or not top else _longer_or_shorter(text, q["answers"])
        sides[side or ("right" if em else "other")] += 1
        by_type.setdefault(q["type"], []).append(em)
        rows.append(
            {
                "id": q["id"],
                "question": q["question"],
                "gold": q["answers"][0],
                "top1": text,
                "confidence": top.confidence if top else None,
                "em": em,
                "f1": f1,
                "em@k": em_k,
                "passage": top.passage_id if top else None,
                "answer_passage": passage_ok,
                "marks": marks,
                "too": side,
                "topk": [h.text for h in found],
            }
        )
    n = len(questions)
    conf, right_a = np.array(confidence, dtype=float), np.array(right, dtype=bool)
    calibrated = bool(len(conf)) and not np.isnan(conf).any()
    wrong = [r for r in rows if not r["em"]]
    return {
        "em@1": 100 * sum(r["em"] for r in rows) / n,
        "f1@1": 100 * sum(r["f1"] for r in rows) / n,
        f"em@{TOP_K}": 100 * sum(r["em@k"] for r in rows) / n,
        "answer_passage@1": 100 * sum(r["answer_passage"] for r in rows) / n,
        "confidence_right": float(conf[right_a].mean()) if calibrated and right_a.any() else None,
        "confidence_wrong": float(conf[~right_a].mean()) if calibrated and (~right_a).any() else None,
        "auroc": auroc(conf, right_a) if calibrated and 0 < right_a.sum() < len(right_a) else None,
        "marked_top1": marked1,
        f"marked_top{TOP_K}": marked_k,
        f"answers_top{TOP_K}": answers_k,
        "marks_top1": dict(kinds.most_common()),
        "words_right": float(np.mean(lengths[True])) if lengths[True] else None,
        "words_wrong": float(np.mean(lengths[False])) if lengths[False] else None,
        "wrong_longer_holding_right": sides["longer"],
        "wrong_shorter_within_right": sides["shorter"],
        "em@1_by_type": {t: 100 * float(np.mean(v)) for t, v in sorted(by_type.items())},
        "questions_by_type": {t: len(v) for t, v in sorted(by_type.items())},
        "first_wrong": [
            {k: r[k] for k in ("id", "question", "gold", "top1", "confidence", "marks", "too")}
            for r in wrong[:WRONG_SHOWN]
        ],
        "answers": [{k: r[k] for k in ("id", "top1", "confidence", "em", "f1", "topk")} for r in rows],
    }


def measure(model_name: str, settings: Sequence[str], cache: Path | None) -> dict[str, Any]:
    from dphr_haystack import PhraseModel, PhraseSearcher

    started = time.perf_counter()
    passages = build_passages()
    questions = load_questions(passages)
    model = PhraseModel.load(model_name)
    index, index_seconds = _index(model, passages, cache)
    texts = {p["id"]: p["text"] for p in passages}
    q_start, q_end = model.encode_queries([q["question"] for q in questions])
    words = [len(p["text"].split()) for p in passages]
    result: dict[str, Any] = {
        "machine": machine(),
        "model": model_name,
        "model_id": model_id(model_name),
        "corpus": {
            "passages": len(passages),
            "pages": len({p["page"] for p in passages}),
            "words_median": statistics.median(words),
            "words_in_100_180": 100 * float(np.mean([MIN_WORDS <= w <= MAX_WORDS for w in words])),
            "vectors": len(index),
            "index_seconds": index_seconds,
            "sources": corpus_sources(),
        },
        "questions": len(questions),
        "top_k": TOP_K,
        "settings": {},
    }
    for setting in settings:
        searcher = PhraseSearcher(index, model, tidy_answers=setting == "current")
        t0 = time.perf_counter()
        hits = searcher.search_vectors(q_start, q_end, "phrase", TOP_K, questions=[q["question"] for q in questions])
        measured = score(hits, questions, texts)
        measured["search_seconds"] = time.perf_counter() - t0
        result["settings"][setting] = measured
    result["seconds"] = time.perf_counter() - started
    return result


# ----------------------------------------------------------------------------- the result file

SETTING_NAMES = {"current": "tidy answers", "raw": "raw spans"}


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(result: dict[str, Any]) -> str:
    k = result["top_k"]
    corpus = result["corpus"]
    lines = [
        f"Technical text, `{result['model']}`, {result['questions']} questions on {corpus['passages']} passages "
        f"({corpus['pages']} pages of the Python 3.11 docs' rst sources and package READMEs, markup kept; "
        f"{corpus['vectors']} vectors), {result['machine']['cpu']} ({result['machine']['cores']} cores):",
        "",
        f"| run | answers | EM@1 | F1@1 | EM@{k} | answer passage@1 | confidence right / wrong | AUROC "
        f"| marked top-1 | marked top-{k} | words right / wrong | wrong, longer than a right one |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, run in result["runs"].items():
        for setting, m in run["settings"].items():
            lines.append(
                f"| {name} | {SETTING_NAMES[setting]} | {m['em@1']:.1f} | {m['f1@1']:.1f} | {m[f'em@{k}']:.1f} | "
                f"{m['answer_passage@1']:.1f} | {_fmt(m['confidence_right'])} / {_fmt(m['confidence_wrong'])} | "
                f"{_fmt(m['auroc'])} | {m['marked_top1']} | {m[f'marked_top{k}']} of {m[f'answers_top{k}']} | "
                f"{_fmt(m['words_right'], 1)} / {_fmt(m['words_wrong'], 1)} | {m['wrong_longer_holding_right']} |"
            )
    latest = result["runs"][result["recorded"]]["settings"]
    setting = "current" if "current" in latest else next(iter(latest))
    m = latest[setting]
    lines += [
        "",
        f"EM@1 by question type ({result['recorded']}, {SETTING_NAMES[setting]}): "
        + ", ".join(f"{t} {v:.1f} ({m['questions_by_type'][t]})" for t, v in m["em@1_by_type"].items())
        + f"; markup in top-1 answers: {m['marks_top1'] or 'none'}.",
        "",
        f"The first {len(m['first_wrong'])} wrong top answers ({result['recorded']}, {SETTING_NAMES[setting]}):",
        "",
        "| question | gold | top answer | confidence | markup |",
        "|---|---|---|---:|---|",
    ]
    for row in m["first_wrong"]:
        lines.append(
            f"| {_cell(row['question'])} | {_cell(row['gold'])} | {_cell(row['top1'])} | "
            f"{_fmt(row['confidence'], 2)} | {', '.join(row['marks']) or '-'} |"
        )
    return "\n".join(lines)


def _cell(text: str) -> str:
    """Text as a markdown table cell: quoted, newlines and pipes escaped."""
    return repr(text).replace("|", "\\|")


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    k = result["top_k"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    labels, rows = [], []
    for name, run in result["runs"].items():
        for setting, m in run["settings"].items():
            labels.append(f"{name}\n{SETTING_NAMES[setting]}")
            rows.append(m)
    x = np.arange(len(rows))
    for i, (key, label) in enumerate((("em@1", "EM@1"), ("f1@1", "F1@1"), (f"em@{k}", f"EM@{k}"))):
        axes[0].bar(x + (i - 1) * 0.27, [m[key] for m in rows], 0.27, label=label)
    axes[0].set_xticks(x, labels, fontsize=7)
    axes[0].set_ylabel("%")
    axes[0].set_ylim(0, 100)
    axes[0].legend(fontsize=7, ncol=3, loc="upper left")
    axes[0].set_title(f"phrase answers, {result['questions']} questions", fontsize=9)
    axes[1].bar(x - 0.2, [100 * m["marked_top1"] / result["questions"] for m in rows], 0.4, label="top-1")
    axes[1].bar(
        x + 0.2, [100 * m[f"marked_top{k}"] / max(1, m[f"answers_top{k}"]) for m in rows], 0.4, label=f"top-{k}"
    )
    axes[1].set_xticks(x, labels, fontsize=7)
    axes[1].set_ylabel("% of answers holding markup")
    axes[1].legend(fontsize=7)
    axes[1].set_title("answers with markup left in", fontsize=9)
    save_figure(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument(
        "--tidy",
        choices=("both", "current", "raw"),
        default="both",
        help="answers to measure: the tidy answers of the code as it stands, the raw spans, or both (default)",
    )
    parser.add_argument(
        "--record", default="after", help="the name this run is stored under (runs of other names are kept)"
    )
    parser.add_argument("--cache", type=Path, help="keep the built index in this directory for later runs")
    parser.add_argument("--check", action="store_true", help="build the corpus, verify the questions, stop")
    parser.add_argument("--dump", type=Path, help="write the passages as JSON lines to this file, stop")
    args = parser.parse_args()
    if args.check or args.dump:
        passages = build_passages()
        if args.dump:
            with args.dump.open("w", encoding="utf-8") as out:
                for p in passages:
                    out.write(json.dumps(p, ensure_ascii=False) + "\n")
        questions = load_questions(passages)
        words = [len(p["text"].split()) for p in passages]
        print(
            f"{len(passages)} passages ({statistics.median(words)} words median), "
            f"{len(questions)} questions verified: {dict(Counter(q['type'] for q in questions))}"
        )
        return
    settings = ("current", "raw") if args.tidy == "both" else (args.tidy,)
    run = measure(args.model, settings, args.cache)
    run["command"] = " ".join(["nice -n 5 .venv/bin/python -m benchmarks.quality.technical_text", *sys.argv[1:]])
    path = RESULTS / "technical_text.json"
    previous = json.loads(path.read_text())["runs"] if path.is_file() else {}
    previous.pop(args.record, None)
    result = {key: run[key] for key in ("machine", "model", "model_id", "corpus", "questions", "top_k", "command")}
    result.update({"recorded": args.record, "runs": {**previous, args.record: run}, "seconds": run["seconds"]})
    finish_result("technical_text", result, markdown, plot)


if __name__ == "__main__":
    main()
