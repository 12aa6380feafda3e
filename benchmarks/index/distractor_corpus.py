"""Distractor passages for large-corpus phrase indexes: real English text from Debian packages, none of it Wikipedia.

    apt-get update -o Acquire::Languages=en                  # package descriptions live in Translation-en
    apt-get install -y --no-install-recommends $(.venv/bin/python -m benchmarks.index.distractor_corpus --packages)
    nice -n 10 .venv/bin/python -m benchmarks.index.distractor_corpus            # ~180k passages, a few minutes
    nice -n 10 .venv/bin/python -m benchmarks.index.distractor_corpus --combined # + SQuAD-open-small -> corpus-200k

Machine: Intel(R) Xeon(R) Processor (2 cores, 24 GB), Debian 12 (bookworm). Sources, all from the Debian archive's
DFSG-free main:

* ``deb-desc``: every package's long description (``Description-en`` of the archive's Translation-en indices,
  read with ``apt-helper cat-file``), one passage per package when it has at least 20 words (longer ones split);
* ``man``: the manual pages of ``manpages`` and ``manpages-dev`` rendered by ``groff -mandoc -Tutf8`` (``.so``
  aliases skipped), ``pod``: Perl's documentation (``perl-doc``) rendered by ``pod2text``;
* ``doc``: HTML documentation packages (Python 3.11, the Linux kernel 6.1 without its translations, PostgreSQL
  15, git, the Debian reference, developers' reference, policy, handbook (en-US), maintainers' guide, FAQ,
  Django, Apache httpd (en), GNU Octave, zsh, SQLite, SciPy, Erlang/OTP, the Java SE 17 API (javadoc)),
  as text: paragraphs of block elements, code blocks (``pre``), navigation, sidebars and index pages left out.

Long texts are split by ``dphr_haystack.corpus.split_passages`` (at most 150 words, cut at blank lines, then at
sentence ends); passages under ``--min-words`` (20) are dropped, exact duplicates (whitespace-normalised) are kept
once, the first ``--max-passages`` (180,000) are kept (the last source, openjdk-17-doc, is cut there), and any
passage sharing a 10-word shingle with a SQuAD-open-small paragraph is dropped, so the distractors hold no SQuAD
(Wikipedia) text. Passage ids are prefixed by source (``deb-desc:<pkg>``, ``man:<page>.<section>:<n>``,
``pod:<name>:<n>``, ``doc:<package>:<file>:<n>``); the document id groups the passages of one page. Everything is
read in sorted order, so the same package versions give the same file.

Writes runs/scale/distractors.jsonl.gz (``{"id", "title", "text", "document_id"}`` per line), with ``--combined``
runs/scale/corpus-200k.jsonl.gz (the SQuAD-open-small passages, ids as ``dphr_haystack.corpus`` gives them, then
the distractors), and benchmarks/results/distractor_corpus.json (passages per source and package, the package
versions and their licences from /usr/share/doc/<pkg>/copyright).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from html.parser import HTMLParser
from multiprocessing import Pool
from pathlib import Path

from benchmarks.common import ROOT, SQUAD_DEV, SQUAD_TRAIN, machine, write_result
from dphr_haystack.corpus import read_corpus, split_passages

OUT = ROOT / "runs" / "scale"
# The apt packages the corpus is read from (one place: --packages prints them for apt-get install).
MAN_PACKAGES = ("manpages", "manpages-dev")
POD_PACKAGES = ("perl-doc",)
# HTML documentation: package -> (folder, glob, path parts to leave out)
HTML_PACKAGES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "python3.11-doc": ("/usr/share/doc/python3.11/html", "**/*.html", ("_sources", "_static")),
    "linux-doc-6.1": ("/usr/share/doc/linux-doc-6.1/html", "**/*.html", ("translations", "_sources", "_static")),
    "postgresql-doc-15": ("/usr/share/doc/postgresql-doc-15/html", "**/*.html", ()),
    "git-doc": ("/usr/share/doc/git-doc", "**/*.html", ()),
    "debian-reference-en": ("/usr/share/debian-reference", "*.en.html", ()),
    "developers-reference": ("/usr/share/developers-reference", "*.html", ("_sources", "_static")),
    "debian-policy": ("/usr/share/doc/debian-policy", "**/*.html", ()),
    "debian-handbook": ("/usr/share/doc/debian-handbook/html/en-US", "*.html", ()),
    "maint-guide": ("/usr/share/doc/maint-guide/html", "*.en.html", ()),
    "debian-faq": ("/usr/share/doc/debian/FAQ", "*.en.html", ()),
    "python-django-doc": ("/usr/share/doc/python-django-doc/html", "**/*.html", ("_sources", "_static", "_modules")),
    "apache2-doc": ("/usr/share/doc/apache2-doc/manual/en", "**/*.html", ()),
    "octave-doc": ("/usr/share/doc/octave", "**/*.html", ()),
    "zsh-doc": ("/usr/share/doc/zsh-common/html", "*.html", ()),
    "sqlite3-doc": ("/usr/share/doc/sqlite3", "**/*.html", ()),
    "python-scipy-doc": ("/usr/share/doc/python-scipy-doc/html", "**/*.html", ("_sources", "_static", "_modules")),
    "erlang-doc": ("/usr/share/doc/erlang-doc", "**/*.html", ("java",)),
    # last, --max-passages cuts it: the Java SE 17 API documentation (javadoc), without its cross-reference pages
    "openjdk-17-doc": (
        "/usr/share/doc/openjdk-17-jre-headless/api",
        "**/*.html",
        ("class-use", "index-files", "legal", "resources", "script-dir"),
    ),
}
SUPPORT_PACKAGES = ("groff-base", "perl")  # renderers (groff, pod2text); apt-helper comes with apt
APT_PACKAGES = (*MAN_PACKAGES, *POD_PACKAGES, *HTML_PACKAGES, *SUPPORT_PACKAGES)
SKIP_HTML = re.compile(
    r"^(genindex.*|search|py-modindex|modindex|bookindex|index-\w+|package-tree|package-use|overview-tree|"
    r"allclasses-index|allpackages-index|deprecated-list|serialized-form|constant-values|help-doc|index-all)\.html$"
)
TRANSLATIONS = "/var/lib/apt/lists/*_i18n_Translation-en*"
SHINGLE = 10


# ----------------------------------------------------------------------------- package descriptions
def description_records() -> Iterator[tuple[str, str, str]]:
    """``(package, short description, long description)`` of every package in the Translation-en indices."""
    import glob

    files = sorted(glob.glob(TRANSLATIONS))
    if not files:
        raise SystemExit("no Translation-en index: run apt-get update -o Acquire::Languages=en")
    seen: set[str] = set()
    for file in files:
        text = subprocess.run(
            ["/usr/lib/apt/apt-helper", "cat-file", file], check=True, capture_output=True, text=True
        ).stdout
        for record in text.split("\n\n"):
            package, short, lines, in_description = "", "", [], False
            for line in record.split("\n"):
                if line.startswith("Package: "):
                    package = line[9:].strip()
                elif line.startswith("Description-en: "):
                    short, in_description = line[16:].strip(), True
                elif in_description and line.startswith(" "):
                    lines.append(line)
                else:
                    in_description = False
            if package and package not in seen:
                seen.add(package)
                yield package, short, description_text(lines)


def description_text(lines: list[str]) -> str:
    """A Debian long description as paragraphs: `` .`` is a blank line, the leading space goes."""
    out = []
    for line in lines:
        body = line[1:]
        out.append("" if body.strip() == "." else body.strip())
    return "\n".join(out)


def description_passages(min_words: int) -> Iterator[dict]:
    for package, short, text in sorted(description_records()):
        pieces = [p for p in split_passages(text) if len(p.split()) >= min_words]
        title = f"{package}: {short}" if short else package
        for n, piece in enumerate(pieces):
            pid = f"deb-desc:{package}" if len(pieces) == 1 else f"deb-desc:{package}:{n}"
            yield passage(pid, title, piece, f"deb-desc:{package}", "deb-desc", "(package descriptions)")


# ----------------------------------------------------------------------------- manual pages and pods
def package_files(package: str) -> list[str]:
    out = subprocess.run(["dpkg", "-L", package], check=True, capture_output=True, text=True).stdout
    return sorted(line for line in out.splitlines() if os.path.isfile(line))


def render_man(path: str) -> tuple[str, str]:
    """A manual page as plain text (one line per paragraph), or "" for a ``.so`` alias."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
        source = handle.read()
    if source.lstrip().startswith(".so "):
        return path, ""
    result = subprocess.run(
        ["groff", "-mandoc", "-Tutf8", "-rLL=4000n", "-rHY=0", "-P", "-cbou"],
        input=source,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        env={**os.environ, "LC_ALL": "C.UTF-8"},
    )
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    body = lines[1:-1]  # header and footer lines
    return path, "\n".join(line.strip() for line in body)


def render_pod(path: str) -> tuple[str, str]:
    result = subprocess.run(
        ["pod2text", "--utf8", "-w", "4000", path], capture_output=True, text=True, encoding="utf-8", errors="replace"
    )
    return path, "\n".join(line.strip() for line in result.stdout.splitlines())


def page_name(path: str) -> str:
    name = os.path.basename(path)
    return name[:-3] if name.endswith(".gz") else name


def man_passages(pool: Pool, min_words: int) -> Iterator[dict]:
    for package in MAN_PACKAGES:
        files = [f for f in package_files(package) if re.search(r"/usr/share/man/man\d\w*/", f)]
        for path, text in pool.imap(render_man, files, chunksize=8):
            if not text:
                continue
            name = page_name(path)
            title = name.rsplit(".", 1)[0] + f"({name.rsplit('.', 1)[-1]})"
            yield from split_document(f"man:{name}", title, text, package, "man", min_words)


def pod_passages(pool: Pool, min_words: int) -> Iterator[dict]:
    for package in POD_PACKAGES:
        files = [f for f in package_files(package) if f.endswith(".pod")]
        for path, text in pool.imap(render_pod, files, chunksize=4):
            name = page_name(path)[:-4]
            yield from split_document(f"pod:{name}", name, text, package, "pod", min_words)


# ----------------------------------------------------------------------------- HTML documentation
BLOCKS = {
    "p", "div", "li", "ul", "ol", "dl", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "table", "tr", "td", "th",
    "blockquote", "section", "article", "br", "hr", "caption", "figcaption", "title", "header", "footer", "body",
}  # fmt: skip
SKIP_TAGS = {"script", "style", "pre", "nav", "head", "noscript", "svg", "math", "textarea", "select"}
SKIP_CLASS = re.compile(
    r"\b(sphinxsidebar|related|footer|navheader|navfooter|toc|toctree-wrapper|headerlink|highlight|"
    r"breadcrumbs|rst-versions|wy-nav-side|sidebar|navigation|literallayout|programlisting|screen|synopsis|"
    r"member-signature|summary-table|inheritance)\b"
)
VOID = {"br", "hr", "img", "meta", "link", "input", "area", "base", "col", "embed", "source", "track", "wbr"}


class TextExtractor(HTMLParser):
    """The readable text of an HTML page: block elements as paragraphs, skipped elements left out."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self.skip: tuple[str, int] | None = None  # (tag that started the skip, nesting depth of that tag)
        self.in_title = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if self.skip is not None:
            if tag == self.skip[0] and tag not in VOID:
                self.skip = (tag, self.skip[1] + 1)
            return
        if tag == "title":
            self.in_title = True
            return
        attributes = dict(attrs)
        classes = f"{attributes.get('class') or ''} {attributes.get('role') or ''} {attributes.get('id') or ''}"
        if tag in SKIP_TAGS or (tag not in VOID and SKIP_CLASS.search(classes)):
            self.skip = (tag, 1)
            return
        if tag in BLOCKS:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if self.skip is not None:
            if tag == self.skip[0]:
                depth = self.skip[1] - 1
                self.skip = None if depth == 0 else (tag, depth)
            return
        if tag == "title":
            self.in_title = False
        elif tag in BLOCKS:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        elif self.skip is None:
            self.parts.append(data)

    def text(self) -> str:
        paragraphs = ["".join(self.parts)]
        blocks = re.split(r"\n\s*\n", paragraphs[0])
        return "\n\n".join(" ".join(b.split()) for b in blocks if b.strip())


def render_html(path: str) -> tuple[str, str, str]:
    with open(path, encoding="utf-8", errors="replace") as handle:
        source = handle.read()
    parser = TextExtractor()
    parser.feed(source)
    parser.close()
    title = " ".join("".join(parser.title).split())
    return path, title, parser.text()


def html_files(package: str) -> list[str]:
    folder, pattern, leave_out = HTML_PACKAGES[package]
    root = Path(folder)
    files = []
    for path in sorted(root.glob(pattern)):
        parts = path.relative_to(root).parts
        if path.is_file() and not SKIP_HTML.match(path.name) and not any(p in leave_out for p in parts):
            files.append(str(path))
    return files


def html_passages(pool: Pool, min_words: int) -> Iterator[dict]:
    for package, (folder, _, _) in HTML_PACKAGES.items():
        for path, title, text in pool.imap(render_html, html_files(package), chunksize=4):
            relative = os.path.relpath(path, folder)
            yield from split_document(f"doc:{package}:{relative}", title or relative, text, package, "doc", min_words)


# ----------------------------------------------------------------------------- shared
def passage(pid: str, title: str, text: str, document_id: str, source: str, package: str) -> dict:
    return {"id": pid, "title": title, "text": text, "document_id": document_id, "_source": source, "_pkg": package}


def split_document(doc_id: str, title: str, text: str, package: str, source: str, min_words: int) -> Iterator[dict]:
    pieces = [p for p in split_passages(text) if len(p.split()) >= min_words]
    for n, piece in enumerate(pieces):
        yield passage(f"{doc_id}:{n}", title, piece, doc_id, source, package)


def shingles(text: str) -> set[int]:
    words = re.findall(r"\w+", text.lower())
    return {
        int.from_bytes(hashlib.blake2b(" ".join(words[i : i + SHINGLE]).encode(), digest_size=8).digest(), "little")
        for i in range(max(len(words) - SHINGLE + 1, 0))
    }


def squad_open_small() -> list[dict]:
    """SQuAD-open-small: every paragraph of train (rebuilt) and dev (public), ids as dphr_haystack.corpus gives."""
    out = []
    for path in (SQUAD_TRAIN, SQUAD_DEV):
        if not path.is_file():
            raise SystemExit(f"SQuAD data not found at {path}: this step needs ../shared/data")
        for p in read_corpus(path):
            out.append({"id": p.id, "title": p.title, "text": p.text, "document_id": p.document_id})
    return out


def package_info(package: str) -> dict:
    """The installed version and the licences /usr/share/doc/<pkg>/copyright names (DEP-5 ``License:`` lines)."""
    version = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True
    ).stdout.strip()
    copyright_file = Path("/usr/share/doc") / package / "copyright"
    licences: Counter = Counter()
    files_star = None
    text = copyright_file.read_text(errors="replace") if copyright_file.is_file() else ""
    for paragraph in re.split(r"\n\s*\n", text):
        fields = dict(re.findall(r"^(Files|License):[ \t]*(.*)$", paragraph, re.MULTILINE))
        if fields.get("License"):
            licences[fields["License"].strip()] += 1
            if files_star is None and fields.get("Files", "").split() == ["*"]:
                files_star = fields["License"].strip()
    return {
        "version": version,
        "copyright_file": str(copyright_file),
        "licence_main": files_star or LICENCE_NOTES.get(package) or next(iter(licences), ""),
        "licences_named": dict(licences.most_common(8)),
        "note": LICENCE_NOTES.get(package, ""),
    }


LICENCE_NOTES = {  # read from each copyright file by hand where it is not machine-readable (DEP-5)
    "python3.11-doc": "Python Software Foundation License (PSF-2.0), per /usr/share/doc/python3.11-doc/copyright",
    "debian-faq": "Verbatim-copying permissive licence of Software in the Public Interest (copyright file)",
    "debian-handbook": "GPL-2.0+ or CC-BY-SA-3.0 (Raphaël Hertzog, Roland Mas)",
    "manpages": "Per page: mostly Linux-man-pages-copyleft, some GPL/BSD variants (see copyright)",
    "manpages-dev": "Per page: mostly Linux-man-pages-copyleft, some GPL/BSD variants (see copyright)",
}
DESCRIPTION_LICENCE = (
    "Package descriptions come from the Debian archive's Translation-en indices (bookworm, main): each is part of "
    "its source package's debian/control, written by its Debian maintainers (often from upstream text) and "
    "distributed under that package's own licence; Debian main holds only DFSG-free packages."
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT / "distractors.jsonl.gz")
    parser.add_argument(
        "--combined",
        type=Path,
        nargs="?",
        const=OUT / "corpus-200k.jsonl.gz",
        default=None,
        help="also write SQuAD-open-small + the distractors here (default runs/scale/corpus-200k)",
    )
    parser.add_argument("--min-words", type=int, default=20)
    parser.add_argument(
        "--max-passages",
        type=int,
        default=180_000,
        help="stop once this many distractors are written (the last source, openjdk-17-doc, is cut)",
    )
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--packages", action="store_true", help="print the apt packages needed and exit")
    args = parser.parse_args()
    if args.packages:
        print(" ".join(APT_PACKAGES))
        return 0
    started = time.perf_counter()
    squad = squad_open_small()
    squad_shingles: set[int] = set()
    for record in squad:
        squad_shingles |= shingles(record["text"])
    seen_text: set[bytes] = set()
    per_source: Counter = Counter()
    per_package: Counter = Counter()
    dropped = Counter()
    seconds: dict[str, float] = {}
    capped = None  # the first passage left out by --max-passages
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    with Pool(args.processes) as pool, gzip.open(tmp, "wt", encoding="utf-8", compresslevel=6) as out:
        for name, generator in (
            ("deb-desc", description_passages(args.min_words)),
            ("man", man_passages(pool, args.min_words)),
            ("pod", pod_passages(pool, args.min_words)),
            ("doc", html_passages(pool, args.min_words)),
        ):
            start = time.perf_counter()
            for record in generator:
                if sum(per_source.values()) >= args.max_passages:
                    capped = capped or record["id"]
                    break
                key = hashlib.blake2b(" ".join(record["text"].split()).encode(), digest_size=16).digest()
                if key in seen_text:
                    dropped["duplicate"] += 1
                    continue
                seen_text.add(key)
                if shingles(record["text"]) & squad_shingles:
                    dropped["shares_squad_text"] += 1
                    continue
                source, package = record.pop("_source"), record.pop("_pkg")
                per_source[source] += 1
                per_package[package] += 1
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            seconds[name] = round(time.perf_counter() - start, 1)
            print(f"{name}: {per_source[name]:,} passages in {seconds[name]:.0f}s", flush=True)
    tmp.replace(args.out)
    total = sum(per_source.values())
    if args.combined:
        ctmp = args.combined.with_name(args.combined.name + ".tmp")
        with gzip.open(ctmp, "wt", encoding="utf-8", compresslevel=6) as out:
            for record in squad:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            with gzip.open(args.out, "rt", encoding="utf-8") as distractors:
                for line in distractors:
                    out.write(line)
        ctmp.replace(args.combined)
    packages = {p: {"passages": per_package[p], **package_info(p)} for p in APT_PACKAGES if p in per_package}
    packages["(package descriptions)"] = {
        "passages": per_package["(package descriptions)"],
        "licence_main": DESCRIPTION_LICENCE,
    }
    result = {
        "benchmark": "distractor_corpus",
        "machine": machine(),
        "command": " ".join([".venv/bin/python -m benchmarks.index.distractor_corpus", *sys.argv[1:]]),
        "debian": Path("/etc/debian_version").read_text().strip(),
        "apt_packages": list(APT_PACKAGES),
        "output": str(args.out.relative_to(ROOT)) if args.out.is_relative_to(ROOT) else str(args.out),
        "passages": total,
        "passages_per_source": dict(per_source),
        "dropped": dict(dropped),
        "min_words": args.min_words,
        "max_passages": args.max_passages,
        "capped_at": capped,
        "max_words": 150,
        "squad_open_small_passages": len(squad),
        "combined": str(args.combined) if args.combined else None,
        "combined_passages": len(squad) + total if args.combined else None,
        "packages": packages,
        "seconds_per_source": seconds,
        "seconds": round(time.perf_counter() - started, 1),
    }
    write_result("distractor_corpus", result)
    print(json.dumps({k: result[k] for k in ("passages", "passages_per_source", "dropped", "seconds")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
