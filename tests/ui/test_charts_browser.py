"""Every chart the service draws, as Chromium renders it: visible, with the words a reader looks
for, nothing fetched from elsewhere, and no text drawn over another text (the bounding boxes of
the SVG's text elements, as laid out by the browser, pairwise disjoint). Each chart is also
saved as a PNG (to `RIDGELINE_UI_SHOTS` when set) for a person to look at.
"""

from __future__ import annotations

import os
import time
from itertools import combinations
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import TEST_API_KEY
from tests.ui.conftest import OfflinePage

SVG = {"Accept": "image/svg+xml"}
_TOUCH_PX = 0.5
"""Two texts overlap when their boxes share more than this in both directions (anti-aliasing
slack: glyph boxes of adjacent tick labels may touch)."""


def _drawn(
    browser: object, offline_page: OfflinePage, server: str, svg: str, name: str, tmp_path: Path
) -> tuple[object, list[tuple[str, float, float, float, float]]]:
    """The page showing `svg` and its texts' boxes (text, x, y, width, height); the PNG
    saved."""
    page, refused = offline_page(browser, server)
    page.set_viewport_size({"width": 1000, "height": 900})  # type: ignore[attr-defined]
    page.set_content(svg)  # type: ignore[attr-defined]
    chart = page.locator("svg").first  # type: ignore[attr-defined]
    chart.screenshot(path=str(tmp_path / f"{name}.png"))
    if os.environ.get("RIDGELINE_UI_SHOTS"):
        chart.screenshot(path=os.environ["RIDGELINE_UI_SHOTS"] + f"/{name}.png")
    boxes = page.evaluate(  # type: ignore[attr-defined]
        """() => Array.from(document.querySelectorAll('svg text'))
            .map(t => { const r = t.getBoundingClientRect();
                        return [t.textContent, r.x, r.y, r.width, r.height]; })
            .filter(b => b[0].trim() !== '' && b[3] > 0)"""
    )
    assert refused == []
    return page, [tuple(box) for box in boxes]


def _overlapping(boxes: list[tuple[str, float, float, float, float]]) -> list[tuple[str, str]]:
    clashes = []
    for (text_a, xa, ya, wa, ha), (text_b, xb, yb, wb, hb) in combinations(boxes, 2):
        wide = min(xa + wa, xb + wb) - max(xa, xb)
        tall = min(ya + ha, yb + hb) - max(ya, yb)
        if wide > _TOUCH_PX and tall > _TOUCH_PX:
            clashes.append((text_a, text_b))
    return clashes


def _texts(boxes: list[tuple[str, float, float, float, float]]) -> str:
    return "\n".join(box[0] for box in boxes)


def test_the_overlap_check_sees_overlapping_boxes() -> None:
    """The check itself: two boxes sharing 10 x 5 px clash; side by side ones do not."""
    assert _overlapping([("a", 0, 0, 20, 10), ("b", 10, 5, 20, 10)]) == [("a", "b")]
    assert _overlapping([("a", 0, 0, 20, 10), ("b", 20, 0, 20, 10)]) == []


_SWEEP = {
    "model": "llama-3-8b",
    "gpu": "h100-sxm5-80gb",
    "slo": {"ttft_ms": 500, "tpot_ms": 50},
    "workload": {"dataset": "sharegpt", "num_requests": 300},
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sweep", "words"),
    [
        (
            {"points": 6},
            ("TTFT p99", "TPOT p50", "SLO 500 ms", "SLO 50 ms", "saturates at", "saturated"),
        ),
        ({"concurrency": [1, 4, 16, 64, 256]}, ("TTFT p90", "concurrent users", "SLO 50 ms")),
    ],
)
def test_a_sweep_chart_draws_percentiles_against_load_with_no_text_over_another(
    server: str,
    browser: object,
    offline_page: OfflinePage,
    tmp_path: Path,
    sweep: dict[str, Any],
    words: tuple[str, ...],
) -> None:
    answer = httpx.post(
        f"{server}/v1/simulations/sweeps", json=_SWEEP | sweep, headers=SVG, timeout=120
    )
    assert answer.status_code == 200, answer.text
    name = "sweep-" + ("concurrency" if "concurrency" in sweep else "rates")
    page, boxes = _drawn(browser, offline_page, server, answer.text, name, tmp_path)
    box = page.locator("svg").first.bounding_box()  # type: ignore[attr-defined]
    assert box is not None and box["width"] > 600 and box["height"] > 500
    for word in words:
        assert word in _texts(boxes), word
    assert _overlapping(boxes) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "body",
    [
        # Four phases; prefill (2,806 FLOP/B) and prefill attention (1,638) on one roof: their
        # labels, once printed beside the points, covered each other and the title.
        {
            "gpu": "h100-sxm5-80gb",
            "model": "llama-3-8b",
            "prompt_tokens": 2048,
            "context_tokens": 4096,
            "batch_size": 64,
        },
        # An fp8 roof beside the bf16 one: two roofs, two ridges.
        {
            "gpu": "h100-sxm5-80gb",
            "model": "llama-3-8b",
            "prompt_tokens": 2048,
            "context_tokens": 4096,
            "batch_size": 64,
            "kv_dtype": "fp8",
        },
        {"gpu": "h100-sxm5-80gb", "prompt_tokens": 512, "context_tokens": 512, "batch_size": 8},
    ],
    ids=["llama-3-8b", "llama-3-8b-fp8-kv", "generic"],
)
def test_the_roofline_labels_never_overlap(
    server: str, browser: object, offline_page: OfflinePage, tmp_path: Path, body: dict[str, Any]
) -> None:
    answer = httpx.post(f"{server}/v1/roofline", json=body, headers=SVG, timeout=60)
    assert answer.status_code == 200, answer.text
    phases = httpx.post(f"{server}/v1/roofline", json=body, timeout=60).json()["phases"]
    name = "roofline-" + str(body.get("model", "generic")) + "-" + str(body.get("kv_dtype", ""))
    _, boxes = _drawn(browser, offline_page, server, answer.text, name, tmp_path)
    text = _texts(boxes)
    assert "ridge" in text and "attainable TFLOP/s" in text
    for phase in phases:  # every phase named, with its intensity and bound
        assert f"{phase['name']} ({phase['compute_dtype']})" in text, phase["name"]
    assert _overlapping(boxes) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "lengths", "crossover_drawn"),
    [
        # Llama-3.1-8B: crossover 53,247 tokens, inside its 131,072-token context.
        ("llama-3.1-8b", [1024, 8192, 32768, 65536, 131072], True),
        # Llama-3-8B: the same crossover, beyond its 8,192-token context: said, not drawn.
        ("llama-3-8b", [512, 1024, 2048, 4096, 8192], False),
    ],
)
def test_the_prefill_crossover_is_drawn_only_within_the_lengths_shown(
    server: str,
    browser: object,
    offline_page: OfflinePage,
    tmp_path: Path,
    model: str,
    lengths: list[int],
    crossover_drawn: bool,
) -> None:
    body = {"model": model, "gpu": "h100-sxm5-80gb", "prompt_tokens": lengths}
    answer = httpx.post(f"{server}/v1/estimates/prefill-curve", json=body, headers=SVG, timeout=60)
    assert answer.status_code == 200, answer.text
    page, boxes = _drawn(browser, offline_page, server, answer.text, f"prefill-{model}", tmp_path)
    text = _texts(boxes)
    assert ("crossover 53,247 tokens" in text) is crossover_drawn
    assert ("outside the lengths shown" in text) is not crossover_drawn
    # Every text inside the picture, and the crossover's label inside the axes' frame.
    svg_box = page.locator("svg").first.bounding_box()  # type: ignore[attr-defined]
    frame = page.locator("#axes_1 #patch_2").bounding_box()  # type: ignore[attr-defined]
    assert svg_box is not None and frame is not None
    for label, x, y, width, height in boxes:
        assert svg_box["x"] <= x and x + width <= svg_box["x"] + svg_box["width"] + 1, label
        assert svg_box["y"] <= y and y + height <= svg_box["y"] + svg_box["height"] + 1, label
        if "crossover" in label or "FLOPs" in label:
            assert frame["x"] <= x and x + width <= frame["x"] + frame["width"], label
    assert _overlapping(boxes) == []


@pytest.mark.slow
def test_a_simulation_chart_renders_in_the_browser(
    server: str, browser: object, offline_page: OfflinePage, tmp_path: Path
) -> None:
    """The SVG a simulation answers: a visible chart with its panels' text (queue,
    percentiles, the SLO lines), no text over another."""
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
    svg = httpx.post(f"{server}/v1/simulations", json=body, headers=SVG, timeout=60)
    assert svg.status_code == 200, svg.text
    page, boxes = _drawn(browser, offline_page, server, svg.text, "simulation", tmp_path)
    box = page.locator("svg").first.bounding_box()  # type: ignore[attr-defined]
    assert box is not None and box["width"] > 600 and box["height"] > 500
    for words in ("waiting", "running", "SLO 500 ms", "TPOT percentiles"):
        assert words in _texts(boxes), words
    assert _overlapping(boxes) == []


@pytest.mark.slow
def test_a_plan_chart_renders_in_the_browser(
    server: str, browser: object, offline_page: OfflinePage, tmp_path: Path
) -> None:
    """A stored plan drawn as SVG: Chromium shows the axes, the cheapest candidate and the SLO."""
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
    # 201 when planned within the request, 202 while it runs on: then asked again until done.
    assert created.status_code in {201, 202}, created.text
    location = f"{server}{created.headers['location']}"
    deadline = time.monotonic() + 120
    while httpx.get(location, timeout=60).json()["status"] == "running":
        assert time.monotonic() < deadline, "the plan is still running after 120 s"
        time.sleep(0.5)
    svg = httpx.get(location, headers=SVG, timeout=60)
    page, boxes = _drawn(browser, offline_page, server, svg.text, "plan", tmp_path)
    box = page.locator("svg").first.bounding_box()  # type: ignore[attr-defined]
    assert box is not None and box["width"] > 600
    for words in ("cheapest", "TTFT p99 SLO 1000 ms", "cost (USD per hour)"):
        assert words in _texts(boxes), words


@pytest.mark.slow
def test_the_validation_chart_draws_every_family_with_no_text_over_another(
    server: str, browser: object, offline_page: OfflinePage, tmp_path: Path
) -> None:
    """GET /v1/validation as a chart: predicted against measured, each family and metric in
    the legend, the title naming the comparisons and sources, no label over another."""
    answer = httpx.get(f"{server}/v1/validation", headers=SVG, timeout=60)
    assert answer.status_code == 200, answer.text
    page, boxes = _drawn(browser, offline_page, server, answer.text, "validation", tmp_path)
    box = page.locator("svg").first.bounding_box()  # type: ignore[attr-defined]
    assert box is not None and box["width"] > 600 and box["height"] > 500
    texts = _texts(boxes)
    for word in ("published latencies of", "dense TTFT", "mla TPOT", "gpt-oss TPOT", "measured"):
        assert word in texts, word
    assert _overlapping(boxes) == []
