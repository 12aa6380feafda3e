"""The web page's "Say when the documents hold no answer" option in a real browser (Debian's Chromium driven by
Playwright) against ``dphr serve`` with the calibrated tiny model.

The option is a labelled checkbox, off by default and worked by the keyboard; the page sends its state as
``no_answer`` to ``/compare``. When the no-answer comes first the page shows "Not in these documents" with its
probability (as it shows confidences) above the answers, which stay below as best guesses; when it comes last, a line
below the answers; when the option is off, nothing. Where it comes is set here by adding ``no_answer_threshold``
(1.0: always first, 0.0: always last) to the page's own request, so that no test depends on the model's confidences.

Skipped when ``/usr/bin/chromium`` or Playwright is missing (``bash scripts/setup_browser.sh`` installs Chromium),
unless ``DPHR_REQUIRE_BROWSER=1``, which turns the skip into a failure.
"""

from __future__ import annotations

import copy
import json
import re

import pytest

from tests.browser.conftest import open_page, serving_tiny_passages
from tests.core.test_answers_every_unit import QUESTION, save_calibrated, save_holding

pytestmark = [pytest.mark.browser, pytest.mark.integration]

LABEL = "Say when the documents hold no answer"
PROBABILITY = re.compile(r"probability (\d+|<1|>99)%")


@pytest.fixture(scope="module")
def server(tmp_path_factory, _tiny_model_session):
    """``dphr serve`` on a fresh store with the six tiny passages, the tiny model with a calibration, CPU."""
    pytest.importorskip("requests")
    tmp = tmp_path_factory.mktemp("no-answer-page")
    model = save_calibrated(copy.deepcopy(_tiny_model_session), tmp / "calibrated")
    with serving_tiny_passages(tmp, model) as url:
        yield url


@pytest.fixture
def page(browser, server, console_errors):
    context, page = open_page(browser, server, console_errors, 1400, 1000)
    yield page
    context.close()


@pytest.fixture
def phone(browser, server, console_errors):
    context, page = open_page(browser, server, console_errors, 390, 844)
    yield page
    context.close()


class Compare:
    """The page's ``/compare`` requests as sent (``sent``) and their answers (``answers``); ``threshold`` (when
    not None) is added to each request as ``no_answer_threshold``."""

    def __init__(self, page, threshold: float | None = None) -> None:
        self.sent: list[dict] = []
        self.answers: list[dict] = []
        self.threshold = threshold
        page.route("**/compare", self._route)

    def _route(self, route, request) -> None:
        body = json.loads(request.post_data)
        self.sent.append(dict(body))
        if self.threshold is not None:
            body["no_answer_threshold"] = self.threshold
        response = route.fetch(post_data=json.dumps(body))
        self.answers.append(response.json())
        route.fulfill(response=response)

    def column(self) -> list[dict]:
        """The phrase answers of the last answer."""
        return next(c for c in self.answers[-1]["columns"] if c["name"] == "answers")["answers"]


def _ask(page, question: str = QUESTION) -> None:
    page.fill("#question", question)
    page.press("#question", "Enter")
    page.wait_for_function(
        "q => !document.getElementById('ask-button').disabled && document.querySelectorAll('.column').length === 3"
        " && document.getElementById('question').value === q",
        arg=question,
    )
    assert page.locator("#error").is_hidden(), page.locator("#error").inner_text()


def _percent(value: float) -> str:
    """A probability as the page writes it."""
    if value < 0.005:
        return "<1%"
    if value > 0.995:
        return ">99%"
    return f"{int(value * 100 + 0.5)}%"


def _turn_on(page) -> None:
    """Tick the option with the keyboard: Tab from the results menu reaches it, Space ticks it."""
    box = page.get_by_label(LABEL)
    page.focus("#top-k")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.id") == "no-answer-option"
    page.keyboard.press("Space")
    assert box.is_checked()


def test_the_option_is_labelled_off_by_default_and_off_changes_nothing(page, console_errors):
    box = page.get_by_label(LABEL)
    assert (
        box.count() == 1 and box.get_attribute("id") == "no-answer-option" and box.get_attribute("type") == "checkbox"
    )
    assert box.is_visible() and not box.is_checked()
    compare = Compare(page)
    _ask(page)
    assert compare.sent[-1]["no_answer"] is False
    assert not any((a.get("meta") or {}).get("no_answer") for a in compare.column())
    assert page.locator("#no-answer").is_hidden() and page.locator("#no-answer-last").is_hidden()
    assert page.locator("#guesses").is_hidden()
    assert "Not in these documents" not in page.locator("main").inner_text()
    assert page.locator("#answer-list li.answer").count() == len(compare.column())
    assert console_errors == []


def test_not_in_these_documents_comes_first_with_the_answers_below_as_best_guesses(page, console_errors):
    compare = Compare(page, threshold=1.0)
    _turn_on(page)
    _ask(page)
    assert compare.sent[-1]["no_answer"] is True and "no_answer_threshold" not in compare.sent[-1]
    answers = compare.column()
    assert answers[0]["meta"]["no_answer"] is True and answers[0]["answer"] == ""
    result = page.locator("#no-answer")
    assert result.is_visible() and result.get_attribute("role") == "status"
    assert "Not in these documents" in result.inner_text()
    label = result.locator(".confidence-label").inner_text()
    assert PROBABILITY.fullmatch(label) and label == f"probability {_percent(answers[0]['score'])}"
    assert "probability" in (result.locator(".confidence").get_attribute("title") or "")
    top = answers[0]["meta"]["top_confidence"]
    assert f"has a {_percent(top)} chance of being right" in result.inner_text()
    # the answers stay, below it, as best guesses
    guesses = page.locator("#answer-list li.answer")
    assert page.locator("#guesses").is_visible() and page.locator("#guesses").inner_text().lower() == "best guesses"
    assert guesses.count() == len(answers) - 1 >= 1
    assert guesses.first.locator(".answer-text").inner_text() == answers[1]["answer"]
    assert (
        result.bounding_box()["y"] < page.locator("#guesses").bounding_box()["y"] < guesses.first.bounding_box()["y"]
    )
    assert page.locator("#no-answer-last").is_hidden()
    # the calibrated answers keep their confidence note and badges
    assert "probability" in page.locator("#answers-note").inner_text()
    assert re.fullmatch(r"confidence (\d+|<1|>99)%", guesses.first.locator(".confidence-label").inner_text())
    assert console_errors == []


def test_when_the_top_answer_is_confident_it_is_a_line_below_the_answers(page, console_errors):
    compare = Compare(page, threshold=0.0)
    _turn_on(page)
    _ask(page)
    answers = compare.column()
    assert answers[-1]["meta"]["no_answer"] is True
    assert page.locator("#no-answer").is_hidden() and page.locator("#guesses").is_hidden()
    line = page.locator("#no-answer-last")
    assert line.is_visible() and "Not in these documents" in line.inner_text()
    assert line.locator(".confidence-label").inner_text() == f"probability {_percent(answers[-1]['score'])}"
    shown = page.locator("#answer-list li.answer")
    assert shown.count() == len(answers) - 1
    assert shown.first.locator(".answer-text").inner_text() == answers[0]["answer"]
    assert line.bounding_box()["y"] > shown.last.bounding_box()["y"]
    # turned off again, the next question shows no trace of it
    page.get_by_label(LABEL).uncheck()
    _ask(page, "Who created Python?")
    assert compare.sent[-1]["no_answer"] is False
    assert page.locator("#no-answer").is_hidden() and page.locator("#no-answer-last").is_hidden()
    assert "Not in these documents" not in page.locator("main").inner_text()
    assert console_errors == []


def test_the_no_answer_result_fits_a_390_px_phone(phone, console_errors):
    Compare(phone, threshold=1.0)
    phone.get_by_label(LABEL).check()
    _ask(phone)
    assert phone.locator("#no-answer").is_visible()
    scroll_width = phone.evaluate("() => document.documentElement.scrollWidth")
    assert scroll_width <= 390, f"the page is {scroll_width} px wide in a 390 px viewport"
    for selector in ("#no-answer", "label[for=no-answer-option]", "label[for=verify-option]", "#ask-button"):
        box = phone.locator(selector).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, (selector, box)
    assert console_errors == []


@pytest.fixture(scope="module")
def holding_server(tmp_path_factory, _tiny_model_session):
    """``dphr serve`` as :func:`server`, with a model whose calibration gives every query P(the documents hold an
    answer) = 0.3."""
    pytest.importorskip("requests")
    tmp = tmp_path_factory.mktemp("no-answer-page-holding")
    model = save_holding(copy.deepcopy(_tiny_model_session), tmp / "holding", 0.3)
    with serving_tiny_passages(tmp, model) as url:
        yield url


def test_a_model_that_says_whether_the_documents_hold_an_answer_is_read_by_that(
    browser, holding_server, console_errors
):
    context, page = open_page(browser, holding_server, console_errors, 1400, 1000)
    compare = Compare(page)  # the default threshold, 0.4: 0.3 puts "no answer" first
    _turn_on(page)
    _ask(page)
    answers = compare.column()
    assert answers[0]["meta"]["no_answer"] is True and answers[0]["meta"]["holds_answer"] == pytest.approx(0.3)
    result = page.locator("#no-answer")
    assert result.is_visible() and "Not in these documents" in result.inner_text()
    assert result.locator(".confidence-label").inner_text() == "probability 70%"
    assert "hold no answer to the question" in (result.locator(".confidence").get_attribute("title") or "")
    top = answers[0]["meta"]["top_confidence"]
    text = result.inner_text()
    assert "hold an answer to the question with a 30% chance" in text
    assert f"the best answer found has a {_percent(top)} chance of being right" in text
    assert console_errors == []
    context.close()


@pytest.fixture(scope="module")
def reading_server(tmp_path_factory, _tiny_model_session):
    """``dphr serve`` as :func:`server`, with a model whose holds-answer weighs whether the corpus writes the
    question's names."""
    pytest.importorskip("requests")
    from tests.core.test_corpus_words import save_reading_corpus

    tmp = tmp_path_factory.mktemp("no-answer-names-page")
    model = save_reading_corpus(copy.deepcopy(_tiny_model_session), tmp / "reading")
    with serving_tiny_passages(tmp, model) as url:
        yield url


def test_not_in_these_documents_names_what_no_document_writes(browser, reading_server, console_errors):
    context, page = open_page(browser, reading_server, console_errors, 1400, 1000)
    try:
        compare = Compare(page, threshold=1.0)
        _turn_on(page)
        _ask(page, "Who founded Quillfern in Velmora?")  # names the six passages never write
        assert compare.column()[0]["meta"]["unwritten_names"] == ["Quillfern", "Velmora"]
        note = page.locator("#no-answer .no-answer-note").inner_text()
        assert note.endswith("No document writes “Quillfern”, “Velmora”.")
        _ask(page, "Who created Python?")  # every name written: nothing said of names
        assert "unwritten_names" not in compare.column()[0]["meta"]
        assert "No document writes" not in page.locator("#no-answer").inner_text()
        assert console_errors == []
    finally:
        context.close()
