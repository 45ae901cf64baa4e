"""`preferred`: the one reading of the Accept header every route that offers more than JSON uses."""

from __future__ import annotations

import pytest

from app.web.negotiation import JSON, SVG, TEXT, YAML, preferred


@pytest.mark.parametrize(
    ("accept", "offered", "chosen"),
    [
        (None, (JSON, SVG), JSON),  # no header: the first offered
        ("image/svg+xml", (JSON, SVG), SVG),
        ("image/*", (JSON, SVG), SVG),
        ("*/*", (JSON, SVG), JSON),
        ("application/json, image/svg+xml", (JSON, SVG), JSON),  # equal q: header order
        ("application/json;q=0.5, image/svg+xml", (JSON, SVG), SVG),  # higher q first
        ("image/svg+xml;q=0", (JSON, SVG), JSON),  # q=0: not acceptable
        ("image/svg+xml;q=abc", (JSON, SVG), JSON),  # an unreadable q counts as 0
        ("text/html", (JSON, TEXT, YAML), JSON),  # nothing offered matches
        ("Application/YAML", (JSON, TEXT, YAML), YAML),  # media types are case-insensitive
        ("text/*;q=0.9, application/yaml;q=0.8", (JSON, TEXT, YAML), TEXT),
    ],
)
def test_the_accept_header_picks_what_it_ranks_highest(
    accept: str | None, offered: tuple[str, ...], chosen: str
) -> None:
    assert preferred(accept, offered) == chosen
