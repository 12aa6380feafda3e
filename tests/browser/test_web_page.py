"""The web page in a real browser (Debian's Chromium driven by Playwright) against ``dphr serve``.

The server is the real command in a child process: the shipped model, a store directory filled with ``--corpus`` (the
first paragraphs of the shipped SQuAD dev set). The page must show phrase answers highlighted inside their passages
with a confidence, the BM25, phrase passage and hybrid columns with a latency each, take a ``.txt`` upload and then
answer from it, and show document text that contains markup as text (no script of a document runs).

Skipped when ``/usr/bin/chromium`` or Playwright is missing (``bash scripts/setup_browser.sh`` installs Chromium),
unless ``DPHR_REQUIRE_BROWSER=1``, which turns the skip into a failure. ``DPHR_WEB_SCREENSHOT=path.png`` saves a
screenshot of the answered page there.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sys
from pathlib import Path

import pytest

from tests._server import free_port, running_server

pytestmark = [pytest.mark.browser, pytest.mark.integration]

CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[2]
PASSAGES = 12  # the first paragraphs of squad-dev (Super Bowl 50)
QUESTION = "Who headlined the Super Bowl 50 halftime show?"
UPLOADED = [
    "The Brinemoor lighthouse was designed by the engineer Talia Okonkwo and first lit in 1874. Its lamp could be "
    "seen forty kilometres out to sea.",
    '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> The harbour of Quillon is guarded '
    "by two bronze lions cast in 1902.",
]
LATENCY = re.compile(r"^\d+(\.\d)? ms$")


def _unavailable(reason: str) -> None:
    if os.environ.get("DPHR_REQUIRE_BROWSER") == "1":
        pytest.fail(f"DPHR_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    """Chromium through Playwright (never a downloaded browser)."""
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} is missing (bash scripts/setup_browser.sh installs Debian's chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright is not installed (pip install playwright; the dev extra has it)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``dphr serve`` on a fresh store with the first SQuAD dev paragraphs (the shipped model, CPU)."""
    try:
        importlib.metadata.distribution("farm-haystack")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("dphr serve needs farm-haystack (Haystack 1.x): not in this environment")
    pytest.importorskip("fastapi", reason='the serve extra is not installed (pip install "dphr-haystack[serve]")')
    pytest.importorskip("requests")
    from dphr_haystack.corpus import read_corpus

    tmp = tmp_path_factory.mktemp("web-page")
    corpus = tmp / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as handle:
        for number, passage in enumerate(read_corpus("squad-dev")):
            if number == PASSAGES:
                break
            handle.write(json.dumps({"id": passage.id, "title": passage.title, "text": passage.text}) + "\n")
    port = free_port()
    command = [sys.executable, "-m", "dphr_haystack", "serve", "--store", str(tmp / "store"), "--corpus", str(corpus)]
    command += ["--device", "cpu", "--port", str(port)]
    env = {**os.environ, "HAYSTACK_TELEMETRY_ENABLED": "False", "FILE_UPLOAD_PATH": str(tmp / "uploads")}
    with running_server(command, port, tmp / "server.log", REPO, env, "dphr serve", timeout=300) as url:
        yield f"{url}/", tmp


@pytest.fixture
def console_errors() -> list[str]:
    """The page's console errors and uncaught exceptions (a Content-Security-Policy violation is one)."""
    return []


@pytest.fixture
def page(browser, server, console_errors):
    """A fresh page on the server."""
    url, _ = server
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.on("console", lambda message: console_errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: console_errors.append(str(error)))
    page.goto(url)
    yield page
    context.close()


def _ask(page, question: str) -> None:
    page.fill("#question", question)
    page.press("#question", "Enter")
    page.wait_for_function(
        "q => !document.getElementById('ask-button').disabled && document.querySelectorAll('.column').length === 3"
        " && document.getElementById('question').value === q",
        arg=question,
    )
    assert page.locator("#error").is_hidden(), page.locator("#error").inner_text()


def test_answers_are_highlighted_in_their_passages_beside_three_columns(page, console_errors):
    page.wait_for_function("() => /12 passages in the store/.test(document.getElementById('store').textContent)")
    _ask(page, QUESTION)

    answers = page.locator("#answer-list li.answer")
    assert answers.count() >= 1
    first = answers.first
    answer = first.locator(".answer-text").inner_text()
    mark = first.locator("p.passage mark.phrase")
    assert mark.count() == 1 and mark.inner_text() == answer  # highlighted inside its passage ...
    passage = first.locator("p.passage").inner_text()
    assert len(passage) > len(answer) + 40 and answer in passage
    # ... and the trained model finds the right one among its first answers (an untrained one does not)
    texts = [answers.nth(i).locator(".answer-text").inner_text() for i in range(min(3, answers.count()))]
    assert "Coldplay" in texts, texts
    assert re.fullmatch(r"(\d+|<1)% confidence", first.locator(".confidence-label").inner_text())
    assert LATENCY.match(page.locator("#answers-latency").inner_text())

    columns = page.locator("#columns .column")
    assert [columns.nth(i).get_attribute("data-name") for i in range(3)] == ["bm25", "passages", "hybrid"]
    for i in range(3):
        column = columns.nth(i)
        assert LATENCY.match(column.locator(".latency").inner_text()), column.inner_text()[:200]
        assert 1 <= column.locator("li.result").count() <= 5
    # phrase passages highlight their best phrase; BM25 underlines the question's words
    assert columns.nth(1).locator("mark.phrase").count() >= 1
    assert columns.nth(0).locator(".term").count() >= 1

    first.locator("p.passage").click()  # a click shows the whole passage
    assert len(first.locator("p.passage").inner_text()) >= len(passage.strip(" …"))
    if os.environ.get("DPHR_WEB_SCREENSHOT"):
        page.screenshot(path=os.environ["DPHR_WEB_SCREENSHOT"], full_page=True)
    assert console_errors == []


def test_an_uploaded_file_is_answerable_and_its_markup_stays_text(page, server, console_errors):
    _, tmp = server
    upload = tmp / "lighthouses.txt"
    upload.write_text("\n\n".join(UPLOADED), encoding="utf-8")
    page.set_input_files("#files", str(upload))
    page.click("#upload-button")
    page.wait_for_function("() => /^Added /.test(document.getElementById('upload-status').textContent)")
    assert "Added 2 passages from lighthouses.txt" in page.locator("#upload-status").inner_text()
    page.wait_for_function("() => /14 passages in the store/.test(document.getElementById('store').textContent)")

    _ask(page, "Who designed the Brinemoor lighthouse?")
    first = page.locator("#answer-list li.answer").first
    assert first.locator(".answer-text").inner_text() == "Talia Okonkwo"
    assert "Brinemoor lighthouse" in first.locator("p.passage").inner_text()

    _ask(page, "What guards the harbour of Quillon?")
    shown = page.locator("main").inner_text()
    assert "<script>window.__pwned = 1</script>" in shown and '<img src=x onerror="window.__pwned = 2">' in shown
    assert page.evaluate("() => window.__pwned === undefined")
    assert page.locator("main script, main img").count() == 0
    assert console_errors == []


def test_errors_are_shown_not_thrown(page, server):
    """An upload the server refuses (an empty file) is reported on the page; the page keeps working."""
    _, tmp = server
    empty = tmp / "empty.txt"
    empty.write_text("", encoding="utf-8")
    page.set_input_files("#files", str(empty))
    page.click("#upload-button")
    page.wait_for_function("() => /^Upload failed/.test(document.getElementById('upload-status').textContent)")
    assert "EmptyCorpusError" in page.locator("#upload-status").inner_text()
    _ask(page, QUESTION)
    assert page.locator("#answer-list li.answer").count() >= 1
