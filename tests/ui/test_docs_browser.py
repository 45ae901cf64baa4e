"""Swagger UI and ReDoc as a person sees them: in a real headless Chromium, with every request
that leaves the server refused, so a page that needs a CDN shows blank and fails here.

Needs Debian's `chromium` (`.ci/run` installs it) and Python's `playwright` (the dev extra).
Under CI=true a missing browser fails the test; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from app.db.migrate import upgrade
from tests.conftest import TEST_API_KEY, reset_database
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


@pytest.mark.slow
def test_swagger_ui_renders_every_operation_offline(
    server: str, browser: object, tmp_path: Path
) -> None:
    page, refused = _offline_page(browser, server)
    page.goto(f"{server}/docs")  # type: ignore[attr-defined]
    page.wait_for_selector(".opblock", timeout=20_000)  # type: ignore[attr-defined]
    operations = page.locator(".opblock").count()  # type: ignore[attr-defined]
    assert operations >= 35
    assert page.locator("button.authorize").count() == 1  # type: ignore[attr-defined]
    # Authorize with a key, open an estimate, and run its example from the UI.
    page.click("button.authorize")  # type: ignore[attr-defined]
    page.fill(".auth-container input[type=text], .auth-container input", TEST_API_KEY)  # type: ignore[attr-defined]
    page.locator(".auth-btn-wrapper button.authorize").first.click()  # type: ignore[attr-defined]
    page.click("button.btn-done")  # type: ignore[attr-defined]
    prefill = page.locator("#operations-estimates-estimate_prefill_v1_estimates_prefill_post")  # type: ignore[attr-defined]
    prefill.locator(".opblock-summary").click()
    prefill.locator("button.try-out__btn").click()
    body = prefill.locator("textarea.body-param__text").input_value()
    assert '"llama-3-8b"' in body and '"prompt_tokens": 2048' in body
    prefill.locator("button.execute").click()
    status = prefill.locator(".live-responses-table tr.response td.response-col_status").first
    status.wait_for(timeout=20_000)
    assert status.inner_text().strip().startswith("200")
    page.screenshot(path=str(tmp_path / "docs.png"), full_page=False)  # type: ignore[attr-defined]
    if os.environ.get("RIDGELINE_UI_SHOTS"):
        page.screenshot(path=os.environ["RIDGELINE_UI_SHOTS"] + "/docs.png")  # type: ignore[attr-defined]
    assert all(urlsplit(url).netloc != "cdn.jsdelivr.net" for url in refused)


@pytest.mark.slow
def test_redoc_renders_offline(server: str, browser: object) -> None:
    page, _ = _offline_page(browser, server)
    page.goto(f"{server}/redoc")  # type: ignore[attr-defined]
    page.wait_for_selector("[data-section-id]", timeout=30_000)  # type: ignore[attr-defined]
    assert page.locator("[data-section-id]").count() >= 35  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_simulation_chart_renders_in_the_browser(server: str, browser: object) -> None:
    """The SVG a simulation answers is drawn by Chromium: a visible chart with its panels' text
    (queue, percentiles, the SLO lines) and nothing fetched from elsewhere."""
    import httpx  # noqa: PLC0415

    body = {
        "model": "llama-3-8b",
        "gpu": "h100-sxm5-80gb",
        "slo": {"ttft_ms": 500, "tpot_ms": 50},
        "workload": {
            "requests_per_s": 6,
            "num_requests": 300,
            "prompt_tokens": {"p50": 1024, "p90": 2048, "p99": 4096},
            "output_tokens": {"p50": 128, "p90": 256, "p99": 512},
        },
    }
    svg = httpx.post(
        f"{server}/v1/simulations", json=body, headers={"Accept": "image/svg+xml"}, timeout=60
    )
    assert svg.status_code == 200, svg.text
    page, refused = _offline_page(browser, server)
    page.set_content(svg.text)  # type: ignore[attr-defined]
    box = page.locator("svg").bounding_box()  # type: ignore[attr-defined]
    assert box is not None and box["width"] > 600 and box["height"] > 500
    text = page.locator("svg").text_content()  # type: ignore[attr-defined]
    for words in ("waiting", "running", "SLO 500 ms", "TPOT percentiles"):
        assert words in text, words
    assert refused == []


@pytest.mark.slow
def test_a_plan_chart_renders_in_the_browser(server: str, browser: object) -> None:
    """A stored plan drawn as SVG: Chromium shows the axes, the cheapest candidate and the SLO."""
    import httpx  # noqa: PLC0415

    body = {
        "model": "llama-3-8b",
        "gpus": ["h100-sxm5-80gb"],
        "tp_candidates": [1, 2],
        "traffic": {
            "requests_per_s": 10,
            "prompt_tokens": {"p50": 1024, "p90": 2048, "p99": 4096},
            "output_tokens": {"p50": 128, "p90": 256, "p99": 512},
        },
        "slo": {"ttft_p99_ms": 1000, "tpot_p99_ms": 50},
        "probe_requests": 1000,
    }
    created = httpx.post(
        f"{server}/v1/plans",
        json=body,
        headers={"Authorization": f"Bearer {TEST_API_KEY}"},
        timeout=120,
    )
    assert created.status_code == 201, created.text
    svg = httpx.get(
        f"{server}{created.headers['location']}", headers={"Accept": "image/svg+xml"}, timeout=60
    )
    page, refused = _offline_page(browser, server)
    page.set_content(svg.text)  # type: ignore[attr-defined]
    box = page.locator("svg").bounding_box()  # type: ignore[attr-defined]
    assert box is not None and box["width"] > 600
    text = page.locator("svg").text_content()  # type: ignore[attr-defined]
    for words in ("cheapest", "TTFT p99 SLO 1000 ms", "cost (USD per hour)"):
        assert words in text, words
    assert refused == []
