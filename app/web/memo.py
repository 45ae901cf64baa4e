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
Only the event loop touches the memo, so it needs no lock. It is bounded by entries and by bytes
(`max_bytes`: the answers, keys and raw bodies it holds, each side counted in full), the least
recently used going first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, MutableMapping
from typing import Any, Generic, TypeVar

__all__ = ["DEFAULT_MAX_BYTES", "MAX_RAW_BODY_BYTES", "RawKey", "ResponseMemo", "raw_key"]

MemoKey = tuple[str, str, tuple[int, int]]
RawKey = tuple[str, bytes, bytes, bytes, bytes]
"""Path, query string, Content-Type, Accept and body, as received."""
Generations = Callable[..., tuple[int, int] | None]

MAX_RAW_BODY_BYTES = 8192
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
"""The memo's byte budget: half for answers under validated keys, half under raw keys."""
_ENTRY_BYTES = 200
"""What an entry costs beyond its bytes: the key tuple, the dict slot, the objects' headers."""
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


RawEntry = tuple[dict[str, object], tuple[int, int], bytes]
"""What a raw key keeps: the catalog ids the request named, their generations, the answer."""
K = TypeVar("K")
V = TypeVar("V")


def _answer_bytes(key: MemoKey, answer: bytes) -> int:
    return len(key[0]) + len(key[1]) + len(answer) + _ENTRY_BYTES


def _raw_bytes(key: RawKey, entry: RawEntry) -> int:
    return sum(len(part) for part in key) + len(entry[2]) + 2 * _ENTRY_BYTES


class _Bounded(OrderedDict[K, V], Generic[K, V]):
    """Entries, least recently used first, at most `max_entries` of them and `max_bytes` as
    `size` counts them (one entry is kept whatever its size); `held` is that count."""

    def __init__(self, max_entries: int, max_bytes: int, size: Callable[[K, V], int]) -> None:
        super().__init__()
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._size = size
        self.held = 0

    def keep(self, key: K, value: V) -> None:
        """`value` under `key`, the newest; the oldest dropped beyond the bounds."""
        old = self.get(key)
        if old is not None:
            self.held -= self._size(key, old)
        self[key] = value
        self.move_to_end(key)
        self.held += self._size(key, value)
        while len(self) > self._max_entries or (self.held > self._max_bytes and len(self) > 1):
            dropped, gone = self.popitem(last=False)
            self.held -= self._size(dropped, gone)

    def forget(self, key: K) -> None:
        self.held -= self._size(key, self.pop(key))


class ResponseMemo:
    def __init__(self, max_entries: int = 4096, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._max_entries = max_entries
        # Each side (answers under validated keys, under raw keys) has half the bytes.
        self._answers: _Bounded[MemoKey, bytes] = _Bounded(
            max_entries, max_bytes // 2, _answer_bytes
        )
        self._raw: _Bounded[RawKey, RawEntry] = _Bounded(max_entries, max_bytes // 2, _raw_bytes)
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
        self._answers.keep(key, answer)

    @property
    def answer_bytes(self) -> int:
        """Bytes held under validated keys (`_answer_bytes`)."""
        return self._answers.held

    @property
    def raw_bytes(self) -> int:
        """Bytes held under raw keys (`_raw_bytes`)."""
        return self._raw.held

    def get_raw(self, key: RawKey, generations: Generations) -> bytes | None:
        """The answer sent to a request byte-identical to `key`, while the generations of the
        catalog entries it named (`generations(**refs)`) are still those it was made from."""
        found = self._raw.get(key)
        if found is None:
            return None
        refs, made_from, answer = found
        if generations(**refs) != made_from:
            self._raw.forget(key)
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
        self._raw.keep(key, (refs, made_from, answer))

    @property
    def enabled(self) -> bool:
        return self._max_entries > 0

    def __len__(self) -> int:
        return len(self._answers)
