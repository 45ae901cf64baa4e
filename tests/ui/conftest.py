"""The browser tests' server and Chromium: a migrated SQLite database served by uvicorn, and
Debian's `chromium` driven by playwright, with every request that leaves the server refused.

Needs Debian's `chromium` (`.ci/run` installs it) and Python's `playwright` (the dev extra).
Under CI=true a missing browser fails the test; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest

from app.db.migrate import upgrade
from tests.conftest import reset_database
from tests.servers import served

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# As the machine's own check runs it: no sandbox as root, no background traffic.
_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

OfflinePage = Callable[[object, str], tuple[object, list[str]]]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('ui') / 'ridgeline.db'}"
    upgrade(url)
    reset_database(url)
    with served(url) as (base, _):
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if CHROMIUM is None:
        message = "needs Debian's chromium (apt-get install chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: {message}")
        pytest.skip(message)
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=_FLAGS)
        try:
            yield launched
        finally:
            launched.close()


def _offline_page(browser: object, base: str) -> tuple[object, list[str]]:
    """A page that may reach `base` only; the other requests it tries are listed."""
    host = urlsplit(base).netloc
    page = browser.new_page()  # type: ignore[attr-defined]
    refused: list[str] = []

    def route(request_route: object) -> None:
        url = request_route.request.url  # type: ignore[attr-defined]
        if urlsplit(url).netloc == host or url.startswith(("data:", "blob:")):
            request_route.continue_()  # type: ignore[attr-defined]
        else:
            refused.append(url)
            request_route.abort()  # type: ignore[attr-defined]

    page.route("**/*", route)
    return page, refused


@pytest.fixture
def offline_page() -> OfflinePage:
    """`offline_page(browser, base)`: a page that may reach `base` only, and the list of the
    other requests it tried."""
    return _offline_page
