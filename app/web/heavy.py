"""CPU-heavy work (simulations, plans, charts) off the request path, in a bounded process pool.

A simulation or a plan is seconds of pure Python; run on the event loop or in the thread pool it
would starve catalog reads, estimates and `/readyz` of the GIL. Here each heavy job runs in one
of `processes` worker processes (forkserver-started, at a lower scheduling priority than the API,
each with an address-space limit), with three guards:

- admission: at most `processes + queue` jobs are admitted at once; the next is a 429 with
  `Retry-After`, so a burst of heavy requests is refused, not queued without end;
- cancellation: a client that disconnects has its job stopped (the worker process running it is
  ended and replaced), and so is a job still running after `timeout_s` (a 503);
- the per-request work bounds, checked by each service before it submits a job.

Jobs are plain module-level functions of picklable, frozen arguments (engine specs, traces); what
they raise comes back as raised.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import resource
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import pebble
from starlette.requests import Request

from app.web.problems import ApiProblem

__all__ = ["ClientGone", "HeavyWork", "HeavyWorkLimits"]

P = ParamSpec("P")
T = TypeVar("T")

_NICE = 10
"""Worker processes yield the CPU to the API process (nice 0): 1/10 of its share under load."""


@dataclass(frozen=True, slots=True)
class HeavyWorkLimits:
    processes: int = 1
    queue: int = 2
    timeout_s: float = 120.0
    memory_bytes: int = 4 * 2**30


class ClientGone(ApiProblem):
    """The client disconnected while its heavy job ran; the job was stopped. Answered (to no
    one) as 499, nginx's "client closed request", so logs and metrics count it apart."""

    def __init__(self) -> None:
        super().__init__(
            499, "client-closed-request", "The client disconnected; its job was stopped."
        )


def _init_worker(nice: int, memory_bytes: int) -> None:
    """Runs in each worker process before its first job."""
    os.nice(nice)
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


class HeavyWork:
    """The pool and its admission count. Only the event loop admits and releases, so the count
    needs no lock. The worker processes start with the first job, not with the app."""

    def __init__(self, limits: HeavyWorkLimits) -> None:
        self.limits = limits
        self._pool: pebble.ProcessPool | None = None
        self.admitted = 0
        self.outcomes: dict[str, int] = dict.fromkeys(("done", "failed", "refused", "cancelled"), 0)
        self._mean_job_s = 1.0

    @property
    def capacity(self) -> int:
        return self.limits.processes + self.limits.queue

    def _started(self) -> pebble.ProcessPool:
        if self._pool is None:
            self._pool = pebble.ProcessPool(
                max_workers=self.limits.processes,
                initializer=_init_worker,
                initargs=(_NICE, self.limits.memory_bytes),
                context=multiprocessing.get_context("forkserver"),
            )
        return self._pool

    def retry_after_s(self) -> int:
        """When a refused job might find a free slot: the mean job time so far, rounded up."""
        return max(1, math.ceil(self._mean_job_s))

    async def run(
        self, request: Request | None, job: Callable[P, T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """`job(*args, **kwargs)` in a worker process. 429 when `capacity` jobs are admitted
        already; `ClientGone` when `request`'s client disconnects first (the job is stopped);
        503 when it outlives `timeout_s`."""
        if self.admitted >= self.capacity:
            self.outcomes["refused"] += 1
            raise ApiProblem(
                429,
                "too-many-requests",
                f"All {self.capacity} heavy-work slots (simulations, plans, charts) are taken; "
                "retry shortly.",
                headers={"Retry-After": str(self.retry_after_s())},
            )
        self.admitted += 1
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            future = self._started().schedule(
                job, args=args, kwargs=kwargs, timeout=self.limits.timeout_s
            )
            result = asyncio.wrap_future(future)
            watchers: set[asyncio.Future[Any]] = {result}
            gone = asyncio.ensure_future(_disconnected(request)) if request is not None else None
            if gone is not None:
                watchers.add(gone)
            try:
                done, _ = await asyncio.wait(watchers, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                future.cancel()  # type: ignore[no-untyped-call]  # pebble's stub
                self.outcomes["cancelled"] += 1
                raise
            finally:
                if gone is not None:
                    gone.cancel()
            if result not in done:
                # Ends the worker process running it; pebble starts another.
                future.cancel()  # type: ignore[no-untyped-call]
                self.outcomes["cancelled"] += 1
                raise ClientGone()
            try:
                value = result.result()
            except FutureTimeout:
                self.outcomes["failed"] += 1
                raise ApiProblem(
                    503,
                    "busy",
                    f"The job was stopped after {self.limits.timeout_s:g} s; ask for less work "
                    "(fewer requests or candidates).",
                    headers={"Retry-After": str(self.retry_after_s())},
                ) from None
            except pebble.ProcessExpired as error:
                self.outcomes["failed"] += 1
                raise ApiProblem(
                    503,
                    "busy",
                    f"The worker process running the job ended ({error}); it may have run out "
                    "of memory: ask for less work.",
                    headers={"Retry-After": "1"},
                ) from None
            except BaseException:
                self.outcomes["failed"] += 1  # the job raised (a 422, say): it did run
                raise
            self.outcomes["done"] += 1
            return value
        finally:
            self.admitted -= 1
            elapsed = loop.time() - started
            self._mean_job_s = 0.8 * self._mean_job_s + 0.2 * elapsed

    def close(self) -> None:
        """Stop the workers, ending any job still running."""
        if self._pool is not None:
            self._pool.stop()  # type: ignore[no-untyped-call]
            self._pool.join(timeout=5)
            self._pool = None


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone. The body was read already, so the next ASGI message
    is `http.disconnect` (uvicorn sends it when the connection closes)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
