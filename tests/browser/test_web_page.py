"""The web page in a real browser (Debian's Chromium driven by Playwright) against ``dphr serve``.

The server is the real command in a child process: the shipped model, a store directory filled with ``--corpus`` (the
first paragraphs of the shipped SQuAD dev set). The page must show phrase answers highlighted inside their passages
with a confidence, the BM25, phrase passage and hybrid columns with a latency each and every score labelled for what
it is, take a ``.txt`` upload and then answer from it, report each file of an upload, show document text that contains
markup as text (no script of a document runs), answer a blank or over-long question with a message, and fit a 390 px
phone.

Skipped when ``/usr/bin/chromium`` or Playwright is missing (``bash scripts/setup_browser.sh`` installs Chromium),
unless ``DPHR_REQUIRE_BROWSER=1``, which turns the skip into a failure. ``DPHR_SCREENSHOTS=docs/images`` saves
screenshots of the answered page there: ``web-1400.png`` (1,400 px wide, the whole page) and ``web-390.png`` (390 px,
a phone's first screen).
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
from tests.browser.conftest import open_page

pytestmark = [pytest.mark.browser, pytest.mark.integration]

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
def page(browser, server, console_errors):
    """A fresh page on the server."""
    context, page = open_page(browser, server[0], console_errors, 1400, 1000)
    yield page
    context.close()


def _screenshot(page, name: str, full_page: bool = True) -> None:
    """Save a screenshot as ``name`` in ``DPHR_SCREENSHOTS`` (a folder) when it is set."""
    folder = os.environ.get("DPHR_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name), full_page=full_page)


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
    assert re.fullmatch(r"confidence (\d+|<1|>99)%", first.locator(".confidence-label").inner_text())
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
    _screenshot(page, "web-1400.png")
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


@pytest.fixture
def phone(browser, server, console_errors):
    """A fresh page on the server, 390 px wide (a phone)."""
    context, page = open_page(browser, server[0], console_errors, 390, 844)
    yield page
    context.close()


def _fits(page, width: int) -> None:
    """Nothing scrolls sideways and the Ask button is wholly on screen."""
    scroll_width = page.evaluate("() => document.documentElement.scrollWidth")
    assert scroll_width <= width, f"the page is {scroll_width} px wide in a {width} px viewport"
    box = page.locator("#ask-button").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, box


def test_the_page_fits_a_390_px_phone(phone, console_errors):
    _fits(phone, 390)
    _ask(phone, QUESTION)
    _fits(phone, 390)
    assert phone.locator("#answer-list li.answer").count() >= 1
    for i in range(3):  # the columns stack, each inside the viewport
        box = phone.locator("#columns .column").nth(i).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    phone.locator("#question").evaluate("input => { input.blur(); input.scrollLeft = 0; }")
    phone.evaluate("() => window.scrollTo(0, 0)")
    _screenshot(phone, "web-390.png", full_page=False)  # the first screen: the whole page is 5,000 px tall
    assert console_errors == []


SCORE_LABELS = {
    "bm25": r"BM25 \d\.\d\d \(scaled, not a probability\)",
    "passages": r"confidence (\d+|<1|>99)%",
    "hybrid": r"RRF \d\.\d\d \(rank fusion, not a probability\)",
}


def test_every_score_says_what_it_is(page, console_errors):
    """Answers and phrase passages show a calibrated confidence in percent, BM25 and RRF say they are no
    probabilities; each number has a tooltip and each column a line saying what its numbers mean."""
    _ask(page, QUESTION)
    answers = page.locator("#answer-list li.answer")
    for i in range(answers.count()):
        badge = answers.nth(i).locator(".confidence")
        assert re.fullmatch(r"confidence (\d+|<1|>99)%", badge.locator(".confidence-label").inner_text())
        assert "probability" in (badge.get_attribute("title") or "")
    assert "probability" in page.locator("#answers .score-note").inner_text()

    columns = page.locator("#columns .column")
    for i in range(3):
        column = columns.nth(i)
        name = column.get_attribute("data-name")
        scores = column.locator(".score")
        assert scores.count() >= 1
        for j in range(scores.count()):
            assert re.fullmatch(SCORE_LABELS[name], scores.nth(j).inner_text()), (name, scores.nth(j).inner_text())
            assert scores.nth(j).get_attribute("title"), name
        note = column.locator(".score-note").inner_text()
        assert {"bm25": "bm25", "passages": "confidence", "hybrid": "rank"}[name] in note.lower(), note
    # the best passage's confidence is written as its answer's is (one format per kind)
    top_answer = answers.first.locator(".confidence-label").inner_text()
    top_passage = columns.nth(1).locator(".score").first.inner_text()
    assert top_passage == top_answer
    assert console_errors == []


def test_a_blank_question_clears_the_results_and_says_so(page, console_errors):
    sent: list[str] = []
    page.on("request", lambda r: sent.append(json.loads(r.post_data)["query"]) if r.url.endswith("/compare") else None)
    _ask(page, f"   {QUESTION}  ")
    assert sent == [QUESTION]  # trimmed

    page.fill("#question", "   ")
    page.press("#question", "Enter")
    page.wait_for_function("() => !document.getElementById('error').hidden")
    assert "type a question" in page.locator("#error").inner_text().lower()
    assert page.locator("#answers").is_hidden() and page.locator("#columns").is_hidden()
    assert page.locator("#answer-list li, #columns .column").count() == 0
    assert sent == [QUESTION]  # nothing asked

    _ask(page, QUESTION)  # the next question clears the message
    assert page.locator("#answers").is_visible()
    assert console_errors == []


def test_a_question_over_the_servers_bound_is_capped_and_its_413_shown(page):
    question = page.locator("#question")
    assert question.get_attribute("maxlength") == "1000"  # DPHR_MAX_QUERY_CHARS's default
    question.fill("x" * 1200)
    assert len(question.input_value()) == 1000
    _ask(page, QUESTION)
    # a longer question (a server with a lower bound, or a script) is refused with 413: the page says so
    page.evaluate("() => { document.getElementById('question').value = 'why'.repeat(400); }")
    page.click("#ask-button")
    page.wait_for_function("() => !document.getElementById('error').hidden")
    message = page.locator("#error").inner_text()
    assert "too long" in message and "1200 characters" in message and "1000" in message, message
    assert page.locator("#answers").is_hidden() and page.locator("#columns").is_hidden()


def test_a_multi_file_upload_reports_each_file(page, server, console_errors):
    _, tmp = server
    shared = "The Ostrava night tram runs every twelve minutes between the harbour and the old mill."
    cafe, tram = tmp / "cafe.txt", tmp / "tram.txt"
    cafe.write_bytes(f"The Café Zuberi in Ostrava serves cardamom buns every morning.\n\n{shared}".encode("cp1252"))
    tram.write_text(f"{shared}\n\nThe mill tram stop was renamed Mlýnská in 1931.", encoding="utf-8")

    def upload(*files: Path) -> list[str]:
        page.set_input_files("#files", [str(f) for f in files])
        page.click("#upload-button")
        page.wait_for_function("() => /^Added /.test(document.getElementById('upload-status').textContent)")
        lines = page.locator("#upload-report > li")
        return [lines.nth(i).inner_text() for i in range(lines.count())]

    first, second = upload(cafe, tram)
    assert "Added 3 passages from cafe.txt, tram.txt" in page.locator("#upload-status").inner_text()
    assert first.startswith("cafe.txt:") and "2 added" in first and "0 already stored" in first
    assert "cp1252" in first and "not UTF-8" in first  # the encoding note
    assert second.startswith("tram.txt:") and "1 added" in second and "1 repeated" in second

    (again,) = upload(cafe)
    assert "Added 0 passages from cafe.txt" in page.locator("#upload-status").inner_text()
    assert again.startswith("cafe.txt:") and "0 added" in again and "2 already stored" in again
    assert console_errors == []
