"""One page of what a list use case found, and how many it found in all."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Page"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: Sequence[T]
    """At most `limit` entries, after skipping `offset`, in the list's order."""
    total: int
    """How many entries match the list's filters in all."""
    limit: int
    offset: int
