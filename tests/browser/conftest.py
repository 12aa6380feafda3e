"""The browser tests' Chromium: Debian's, driven by Playwright (never a downloaded browser)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[2]


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


@contextlib.contextmanager
def serving_tiny_passages(tmp: Path, model: Path) -> Iterator[str]:
    """``dphr serve`` on a fresh store with the six tiny passages and the phrase model ``model``, CPU; yields the
    page's URL. Skips where ``dphr serve`` cannot run (no farm-haystack, no serve extra)."""
    from tests._server import free_port, running_server
    from tests.conftest import tiny_passages

    try:
        importlib.metadata.distribution("farm-haystack")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("dphr serve needs farm-haystack (Haystack 1.x): not in this environment")
    pytest.importorskip("fastapi", reason='the serve extra is not installed (pip install "dphr-haystack[serve]")')
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(p) for p in tiny_passages()) + "\n", encoding="utf-8")
    port = free_port()
    command = [sys.executable, "-m", "dphr_haystack", "serve", "--store", str(tmp / "store"), "--corpus", str(corpus)]
    command += ["--model", str(model), "--device", "cpu", "--port", str(port)]
    env = {**os.environ, "HAYSTACK_TELEMETRY_ENABLED": "False", "FILE_UPLOAD_PATH": str(tmp / "uploads")}
    with running_server(command, port, tmp / "server.log", REPO, env, "dphr serve", timeout=300) as url:
        yield f"{url}/"
