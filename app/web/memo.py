"""Answers to repeated estimate requests, kept as the bytes that were sent.

Estimates are pure functions of the request and the catalog entries it names, and a scheduler
asks the same questions many times a second. An answer is keyed by the route, the request body
as validated (defaults filled in, so equivalent bodies share a key) and the generations of the
cached catalog entries it used (`SpecCache.generations`): a catalog write, a run upload or the
cache's expiry starts a new generation, so a remembered answer never outlives its inputs.
Only the event loop touches the memo, so it needs no lock.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["ResponseMemo"]

MemoKey = tuple[str, str, tuple[int, int]]


class ResponseMemo:
    def __init__(self, max_entries: int = 4096) -> None:
        self._max_entries = max_entries
        self._answers: OrderedDict[MemoKey, bytes] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: MemoKey) -> bytes | None:
        answer = self._answers.get(key)
        if answer is None:
            self.misses += 1
            return None
        self._answers.move_to_end(key)
        self.hits += 1
        return answer

    def put(self, key: MemoKey, answer: bytes) -> None:
        self._answers[key] = answer
        self._answers.move_to_end(key)
        while len(self._answers) > self._max_entries:
            self._answers.popitem(last=False)

    def __len__(self) -> int:
        return len(self._answers)
