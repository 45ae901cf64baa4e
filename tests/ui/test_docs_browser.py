"""Swagger UI and ReDoc as a person sees them: in a real headless Chromium, with every request
that leaves the server refused, so a page that needs a CDN shows blank and fails here (the
server and the browser are `tests/ui/conftest.py`'s)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import TEST_API_KEY
from tests.ui.conftest import OfflinePage


@pytest.mark.slow
def test_swagger_ui_renders_every_operation_offline(
    server: str, browser: object, offline_page: OfflinePage, tmp_path: Path
) -> None:
    page, refused = offline_page(browser, server)
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
def test_redoc_renders_offline(server: str, browser: object, offline_page: OfflinePage) -> None:
    page, _ = offline_page(browser, server)
    page.goto(f"{server}/redoc")  # type: ignore[attr-defined]
    page.wait_for_selector("[data-section-id]", timeout=30_000)  # type: ignore[attr-defined]
    assert page.locator("[data-section-id]").count() >= 35  # type: ignore[attr-defined]
