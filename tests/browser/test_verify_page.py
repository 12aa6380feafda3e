"""The web page's "Check the answer with a reader" option in a real browser (Debian's Chromium driven by Playwright)
against ``dphr serve`` with the tiny model whose calibration has a verification by a tiny reader.

The option is a labelled checkbox, off by default, reached by the keyboard after the no-answer option; the page
sends its state as ``verify`` to ``/compare``; on, the phrase answers keep their texts and the page shows the
verified confidences the server returned.

Skipped when ``/usr/bin/chromium`` or Playwright is missing, unless ``DPHR_REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import copy

import pytest

from tests.browser.conftest import open_page, serving_tiny_passages
from tests.browser.test_no_answer_page import Compare, _ask, _percent
from tests.core.test_answers_every_unit import save_verified

pytestmark = [pytest.mark.browser, pytest.mark.integration]

LABEL = "Check the answer with a reader"


@pytest.fixture(scope="module")
def server(tmp_path_factory, _tiny_model_session, tiny_reader_dir):
    """``dphr serve`` on a fresh store with the six tiny passages and the verified tiny model, CPU."""
    tmp = tmp_path_factory.mktemp("verify-page")
    model = save_verified(copy.deepcopy(_tiny_model_session), tmp / "verified", tiny_reader_dir)
    with serving_tiny_passages(tmp, model) as url:
        yield url


@pytest.fixture
def page(browser, server, console_errors):
    context, page = open_page(browser, server, console_errors, 1400, 1000)
    yield page
    context.close()


def test_the_option_sends_verify_and_the_page_shows_the_verified_confidences(page, console_errors):
    box = page.get_by_label(LABEL)
    assert box.count() == 1 and box.get_attribute("type") == "checkbox" and not box.is_checked()
    compare = Compare(page)
    _ask(page)
    assert compare.sent[-1]["verify"] is False
    plain = compare.column()
    page.focus("#no-answer-option")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.id") == "verify-option"
    page.keyboard.press("Space")
    assert box.is_checked()
    _ask(page)
    assert compare.sent[-1]["verify"] is True
    verified = compare.column()
    assert [a["answer"] for a in verified] == [a["answer"] for a in plain]
    assert verified[0]["meta"]["confidence"] != plain[0]["meta"]["confidence"]
    shown = page.locator("#answer-list li.answer").first.locator(".confidence-label").inner_text()
    assert shown == f"confidence {_percent(verified[0]['meta']['confidence'])}"
    assert console_errors == []
