"""`AppState`: the application's `app.state`, read at the cost of a plain attribute.

Starlette's `State` keeps its entries in a dict behind `__getattr__`, so every read first misses
the instance's attributes and only then finds the entry: ~0.4 µs, where a plain attribute takes
~30 ns, and the hot path reads the lifespan's caches several times a request. `AppState` keeps
each entry in that dict, as `State` does, and as an instance attribute too, which is what a read
finds.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import State

__all__ = ["AppState"]


class AppState(State):
    def __setattr__(self, key: Any, value: Any) -> None:
        super().__setattr__(key, value)
        object.__setattr__(self, key, value)

    def __delattr__(self, key: Any) -> None:
        super().__delattr__(key)
        object.__delattr__(self, key)
