"""Folders of .txt/.md files as a corpus (split into passages); Haystack-serialised documents keep their title."""

from __future__ import annotations

import json
import logging

import pytest

from dphr_haystack import CorpusStats, EmptyCorpusError, PhraseIndex, read_corpus
from dphr_haystack.cli import main as dphr
from dphr_haystack.corpus import MAX_PASSAGE_WORDS, markdown_blocks, markdown_title, split_passages, text_files

pytestmark = pytest.mark.unit

LONG_SENTENCES = " ".join(f"Sentence number {i} has exactly seven words." for i in range(40))  # 280 words


def _docs(root):
    """A small documentation tree: nested Markdown and text, a binary file, a Latin-1 file, hidden and other files."""
    (root / "guide").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "guide" / "install.md").write_text(
        "```bash\n# not a title: a shell comment\npip install x\n```\n\n"
        "# Installing the tool\n\nRun the installer. It takes a minute.\n\n"
        "## Offline\n\nCopy the wheel first.\n",
        encoding="utf-8",
    )
    (root / "guide" / "long.txt").write_text(LONG_SENTENCES + "\n", encoding="utf-8")
    (root / "a.txt").write_bytes(b"\xef\xbb\xbfFirst line.\r\nSame paragraph.\r\n\r\nSecond paragraph.\r\n")
    (root / "notes.md").write_text("---\ntitle: Release notes\n---\nNothing new this week.\n", encoding="utf-8")
    (root / "blob.txt").write_bytes(b"\x00\x01binary\x00")
    (root / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (root / "picture.png").write_bytes(b"\x89PNG")
    (root / ".hidden.md").write_text("# Hidden\n\nsecret", encoding="utf-8")
    (root / ".git" / "HEAD.txt").write_text("ref", encoding="utf-8")
    return root


def test_split_passages_packs_paragraphs_and_cuts_long_ones():
    assert split_passages("One two.\n\nThree four five. Six.", max_words=3) == ["One two.", "Three four five.", "Six."]
    assert split_passages("a b\n\nc d\n \n\ne", max_words=5) == ["a b\n\nc d\n\ne"]
    passages = split_passages(LONG_SENTENCES + "\n\nA short tail.")
    assert all(len(p.split()) <= MAX_PASSAGE_WORDS for p in passages)
    assert " ".join(" ".join(passages).split()) == " ".join((LONG_SENTENCES + " A short tail.").split())
    assert passages[0].endswith("words.") and len(passages) == 2  # cut at a sentence end, the tail packed in
    words = " ".join(f"w{i}" for i in range(320))  # one sentence longer than a passage: cut every max_words words
    assert [len(p.split()) for p in split_passages(words)] == [150, 150, 20]
    assert split_passages("   \n\n \n") == []


def test_split_passages_starts_a_passage_at_each_markdown_heading():
    text = "# Title\n\nIntro.\n\n## Part ##\nBody.\n\n```\n# code\n\nmore code\n```\n### Next"
    assert split_passages(text, markdown=True) == ["Title\n\nIntro.", "Part\nBody.\n\n# code\n\nmore code", "Next"]
    assert split_passages(text) == [text]  # plain text: '#' is no heading, nothing is removed


def test_markdown_blocks_keep_the_words_of_links_code_and_bold():
    text = 'See [the guide](https://x.y/z "t") and `dphr index`, **now**. ![logo](l.png)\n**a** __init__ x*y*z'
    assert markdown_blocks(text) == [("See the guide and dphr index, now. logo\na __init__ x*y*z", False)]


def test_markdown_title_skips_code_blocks():
    assert markdown_title("```\n# comment\n```\n# Real title #\n# Second") == "Real title"
    assert markdown_title("## Only a subheading\ntext") == ""
    assert markdown_title("# C#") == "C#"


def test_folder_corpus_ids_titles_order_and_skipped_files(tmp_path, caplog):
    root = _docs(tmp_path / "docs")
    assert [p.relative_to(root).as_posix() for p in text_files(root)] == [
        "a.txt",
        "blob.txt",
        "guide/install.md",
        "guide/long.txt",
        "latin1.txt",
        "notes.md",
    ]
    stats = CorpusStats()
    with caplog.at_level(logging.WARNING, logger="dphr_haystack.corpus"):
        passages = list(read_corpus(root, stats))
    assert [p.id for p in passages] == [
        "a.txt#0",
        "guide/install.md#0",
        "guide/install.md#1",
        "guide/install.md#2",
        "guide/long.txt#0",
        "guide/long.txt#1",
        "notes.md#0",
    ]
    by_id = {p.id: p for p in passages}
    assert by_id["a.txt#0"].text == "First line.\nSame paragraph.\n\nSecond paragraph."  # BOM and CRLF gone
    assert by_id["a.txt#0"].title == "a" and by_id["a.txt#0"].document_id == "a.txt"
    assert {by_id[f"guide/install.md#{i}"].title for i in range(3)} == {"Installing the tool"}
    assert by_id["guide/install.md#0"].text == "# not a title: a shell comment\npip install x"  # code as written
    assert by_id["guide/install.md#1"].text == "Installing the tool\n\nRun the installer. It takes a minute."
    assert by_id["guide/install.md#2"].text == "Offline\n\nCopy the wheel first."
    assert by_id["guide/long.txt#0"].title == "long" and by_id["guide/long.txt#0"].meta == {"name": "guide/long.txt"}
    assert (by_id["notes.md#0"].title, by_id["notes.md#0"].text) == ("Release notes", "Nothing new this week.")
    assert (stats.files, stats.skipped_files, stats.passages) == (4, 2, 7)
    assert "skipped 2 files that are binary or not UTF-8" in caplog.text
    assert [p.id for p in read_corpus(str(root))] == [p.id for p in passages]  # deterministic, str or Path


def test_empty_folder_is_a_clear_error(tmp_path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "image.png").write_bytes(b"\x89PNG")
    with pytest.raises(EmptyCorpusError, match="no .txt or .md files"):
        list(read_corpus(tmp_path / "empty"))


@pytest.mark.parametrize("layout", ["jsonl", "json-list"])
def test_haystack_documents_keep_their_title(tmp_path, layout):
    # What Haystack 1.x Document.to_dict() writes: title and group in meta, text in content.
    records = [
        {
            "content": "Paris is the capital of France.",
            "content_type": "text",
            "score": None,
            "meta": {"title": "Paris", "document_id": "france", "topic": "city"},
            "id_hash_keys": ["content"],
            "embedding": None,
            "id": "d7ed6d96",
        },
        {"content": "Top-level title wins.", "meta": {"title": "meta"}, "title": "top", "id": "x"},
        {"content": "No title at all.", "meta": {}, "id": "y"},
    ]
    path = tmp_path / f"docs.{'jsonl' if layout == 'jsonl' else 'json'}"
    if layout == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    else:
        path.write_text(json.dumps(records), encoding="utf-8")
    passages = list(read_corpus(path))
    assert [(p.id, p.title, p.document_id) for p in passages] == [
        ("d7ed6d96", "Paris", "france"),
        ("x", "top", "x"),
        ("y", "", "y"),
    ]
    assert passages[0].text == "Paris is the capital of France." and passages[0].meta["topic"] == "city"


def test_dphr_index_on_a_folder(tiny_model_dir, tmp_path, capsys):
    root = _docs(tmp_path / "docs")
    args = ["index", "--model", str(tiny_model_dir), "--corpus", str(root), "--out", str(tmp_path / "i")]
    assert dphr([*args, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "read 4 text files; skipped 2 binary or non-UTF-8 files" in out and "indexed 7 passages" in out
    index = PhraseIndex.load(tmp_path / "i")
    assert [p["id"] for p in index.passages][:2] == ["a.txt#0", "guide/install.md#0"]
    assert index.passages[1]["title"] == "Installing the tool"
    assert dphr([*args, "--no-progress"]) == 0  # re-run: resumes, stable ids add nothing twice
    assert PhraseIndex.load(tmp_path / "i").num_passages == 7

    (tmp_path / "nothing").mkdir()
    assert (
        dphr(
            [
                "index",
                "--model",
                str(tiny_model_dir),
                "--corpus",
                str(tmp_path / "nothing"),
                "--out",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )
    assert "no .txt or .md files" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
