"""Content negotiation: which of the media types a route offers the `Accept` header prefers."""

from __future__ import annotations

__all__ = ["JSON", "SVG", "TEXT", "YAML", "preferred"]

JSON = "application/json"
SVG = "image/svg+xml"
TEXT = "text/plain"
YAML = "application/yaml"


def preferred(accept: str | None, offered: tuple[str, ...]) -> str:
    """The first of `offered` that `accept` ranks highest (by q-value, then by its order in the
    header; `type/*` and `*/*` match too, `*/*` the first offered); the first offered when
    nothing acceptable matches or no header was sent (RFC 9110, section 12.5.1)."""
    if not accept:
        return offered[0]
    ranked: list[tuple[float, int, str]] = []
    for index, part in enumerate(accept.split(",")):
        media, *params = (piece.strip().lower() for piece in part.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        ranked.append((-quality, index, media))
    for negative_quality, _, media in sorted(ranked):
        if negative_quality >= 0:
            break
        for kind in offered:
            if media in (kind, "*/*", kind.split("/")[0] + "/*"):
                return kind
    return offered[0]
