"""The browser tests' Chromium: Debian's, driven by Playwright (never a downloaded browser)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")


def unavailable(reason: str) -> None:
    """Skip, or fail where the browser tests must run (``DPHR_REQUIRE_BROWSER=1``, as in CI)."""
    if os.environ.get("DPHR_REQUIRE_BROWSER") == "1":
        pytest.fail(f"DPHR_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    """Chromium through Playwright (never a downloaded browser)."""
    if not CHROMIUM.exists():
        unavailable(f"{CHROMIUM} is missing (bash scripts/setup_browser.sh installs Debian's chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright is not installed (pip install playwright; the dev extra has it)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def console_errors() -> list[str]:
    """The page's console errors and uncaught exceptions (a Content-Security-Policy violation is one)."""
    return []


def open_page(browser, url: str, console_errors: list[str], width: int, height: int):
    """A new browser context of that viewport and a page at ``url`` in it, its console errors collected."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.on("console", lambda message: console_errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: console_errors.append(str(error)))
    page.goto(url)
    return context, page
