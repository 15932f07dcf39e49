"""Browser tests: the live page in Debian's chromium, driven by Playwright (no browser
download: ``executable_path`` is the system one). ``scripts/test.sh`` installs both; without
them these tests fail and say how to install what is missing."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.browser
CHROMIUM_ENV = "PUBSUB_CHROMIUM"


def _missing(reason: str) -> None:
    pytest.fail(f"{reason}: scripts/test.sh installs it")


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = os.environ.get(CHROMIUM_ENV) or shutil.which("chromium")
    if not path:
        _missing("no chromium on PATH (apt-get install chromium)")
    return path


@pytest.fixture(scope="session")
def browser(chromium_path: str) -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[browser]')")
    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where chromium's sandbox refuses to start
        launched = playwright.chromium.launch(
            executable_path=chromium_path, args=["--no-sandbox"], timeout=30_000
        )
        yield launched
        launched.close()
