"""Answers to repeated estimate requests, kept as the bytes that were sent.

Estimates are pure functions of the request and the catalog entries it names, and a scheduler
asks the same questions many times a second. An answer is keyed by the route, the request body
as validated (defaults filled in, so equivalent bodies share a key) and the generations of the
cached catalog entries it used (`SpecCache.generations`): a catalog write (through any replica
on PostgreSQL: `app.catalog.invalidation`), a run upload or the cache's expiry starts a new
generation, so a remembered answer never outlives its inputs.

The same answer is also kept under the request exactly as it arrived (path, query, content type,
Accept and body bytes, bodies up to `MAX_RAW_BODY_BYTES`), with the catalog ids it named: the
middleware answers a byte-identical repeat from there before routing, parsing or validating it
(`app.web.middleware`), after checking that those ids' generations are still the ones used.
Only the event loop touches the memo, so it needs no lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, MutableMapping
from typing import Any

__all__ = ["MAX_RAW_BODY_BYTES", "RawKey", "ResponseMemo", "raw_key"]

MemoKey = tuple[str, str, tuple[int, int]]
RawKey = tuple[str, bytes, bytes, bytes, bytes]
"""Path, query string, Content-Type, Accept and body, as received."""
Generations = Callable[..., tuple[int, int] | None]

MAX_RAW_BODY_BYTES = 8192
"""Longer bodies are remembered only under their validated key (a raw key that size would cost
more memory than parsing it again costs time)."""


def raw_key(scope: MutableMapping[str, Any], headers: dict[bytes, bytes], body: bytes) -> RawKey:
    """The raw key of a request: `headers` as `dict(scope["headers"])` makes them."""
    return (
        scope["path"],
        scope.get("query_string", b""),
        headers.get(b"content-type", b""),
        headers.get(b"accept", b""),
        body,
    )


class ResponseMemo:
    def __init__(self, max_entries: int = 4096) -> None:
        self._max_entries = max_entries
        self._answers: OrderedDict[MemoKey, bytes] = OrderedDict()
        self._raw: OrderedDict[RawKey, tuple[dict[str, object], tuple[int, int], bytes]] = (
            OrderedDict()
        )
        self.raw_paths: set[str] = set()
        """Paths with an answer under a raw key: the only ones whose bodies the middleware reads
        ahead of the app."""
        self.hits = 0
        self.misses = 0
        self.raw_hits = 0

    def get(self, key: MemoKey) -> bytes | None:
        answer = self._answers.get(key)
        if answer is None:
            self.misses += 1
            return None
        self._answers.move_to_end(key)
        self.hits += 1
        return answer

    def put(self, key: MemoKey, answer: bytes) -> None:
        if self._max_entries == 0:
            return
        self._answers[key] = answer
        self._answers.move_to_end(key)
        while len(self._answers) > self._max_entries:
            self._answers.popitem(last=False)

    def get_raw(self, key: RawKey, generations: Generations) -> bytes | None:
        """The answer sent to a request byte-identical to `key`, while the generations of the
        catalog entries it named (`generations(**refs)`) are still those it was made from."""
        found = self._raw.get(key)
        if found is None:
            return None
        refs, made_from, answer = found
        if generations(**refs) != made_from:
            del self._raw[key]
            return None
        self._raw.move_to_end(key)
        self.raw_hits += 1
        return answer

    def put_raw(
        self, key: RawKey, refs: dict[str, object], made_from: tuple[int, int], answer: bytes
    ) -> None:
        if self._max_entries == 0 or len(key[4]) > MAX_RAW_BODY_BYTES:
            return
        self.raw_paths.add(key[0])
        self._raw[key] = (refs, made_from, answer)
        self._raw.move_to_end(key)
        while len(self._raw) > self._max_entries:
            self._raw.popitem(last=False)

    @property
    def enabled(self) -> bool:
        return self._max_entries > 0

    def __len__(self) -> int:
        return len(self._answers)
