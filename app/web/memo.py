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
from typing import Any

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


def _answer_bytes(key: MemoKey, answer: bytes) -> int:
    return len(key[0]) + len(key[1]) + len(answer) + _ENTRY_BYTES


def _raw_bytes(key: RawKey, answer: bytes) -> int:
    return sum(len(part) for part in key) + len(answer) + 2 * _ENTRY_BYTES


class ResponseMemo:
    def __init__(self, max_entries: int = 4096, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes // 2
        """Each side's budget (answers under validated keys, answers under raw keys)."""
        self.answer_bytes = 0
        self.raw_bytes = 0
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
        answers = self._answers
        old = answers.get(key)
        if old is not None:
            self.answer_bytes -= _answer_bytes(key, old)
        answers[key] = answer
        answers.move_to_end(key)
        self.answer_bytes += _answer_bytes(key, answer)
        while len(answers) > self._max_entries or (
            self.answer_bytes > self._max_bytes and len(answers) > 1
        ):
            dropped, gone = answers.popitem(last=False)
            self.answer_bytes -= _answer_bytes(dropped, gone)

    def get_raw(self, key: RawKey, generations: Generations) -> bytes | None:
        """The answer sent to a request byte-identical to `key`, while the generations of the
        catalog entries it named (`generations(**refs)`) are still those it was made from."""
        found = self._raw.get(key)
        if found is None:
            return None
        refs, made_from, answer = found
        if generations(**refs) != made_from:
            del self._raw[key]
            self.raw_bytes -= _raw_bytes(key, answer)
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
        raw = self._raw
        old = raw.get(key)
        if old is not None:
            self.raw_bytes -= _raw_bytes(key, old[2])
        raw[key] = (refs, made_from, answer)
        raw.move_to_end(key)
        self.raw_bytes += _raw_bytes(key, answer)
        while len(raw) > self._max_entries or (self.raw_bytes > self._max_bytes and len(raw) > 1):
            dropped, (_, _, gone) = raw.popitem(last=False)
            self.raw_bytes -= _raw_bytes(dropped, gone)

    @property
    def enabled(self) -> bool:
        return self._max_entries > 0

    def __len__(self) -> int:
        return len(self._answers)
