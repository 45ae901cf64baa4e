"""The scheduler's hot path: catalog answers kept as the bytes sent, estimate repeats answered
before routing, and every cache current after a write: at once in the writing process, and
within a second in every other process on one PostgreSQL database (LISTEN/NOTIFY), with
`ridgeline serve --workers 2` as with separate replicas."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.catalog.invalidation import CatalogInvalidation
from app.catalog.representations import Representation, Representations, target_of
from app.db.migrate import upgrade
from app.logs import REQUEST_ID, JsonFormatter, iso_utc
from app.web import request_log
from app.web.deps import cached_read
from app.web.memo import ResponseMemo, raw_key
from app.web.request_log import _json_string, access_lines
from tests.conftest import AUTH, TEST_API_KEY, reset_database
from tests.servers import served

GPU = "l4-24gb"
PREFILL = {"model": "llama-3-8b", "gpu": GPU, "prompt_tokens": 2048}
NOTIFY_BOUND_S = 1.0
"""How soon another process must see a write: the bound the deployment guide states."""


# the representation cache


def test_an_answer_is_kept_until_its_kind_is_written() -> None:
    clock = [0.0]
    cache = Representations(ttl_s=5.0, clock=lambda: clock[0])
    gpu = Representation(b'{"id":"l4"}', '"1"', "/v1/gpus/{entry_id}")
    page = Representation(b'{"items":[]}')
    cache.put("gpu", "/v1/gpus/l4", gpu, cache.token())
    cache.put("gpu", "/v1/gpus?limit=50", page, cache.token())
    cache.put("model", "/v1/models/m", page, cache.token())
    assert cache.get("/v1/gpus/l4") is gpu
    cache.invalidate("gpu", "other")  # any GPU write: the pages it may be on go too
    assert cache.get("/v1/gpus/l4") is None
    assert cache.get("/v1/gpus?limit=50") is None
    assert cache.get("/v1/models/m") is page
    clock[0] = 5.0  # the TTL, the safety net for a notification that never came
    assert cache.get("/v1/models/m") is None


def test_a_fill_that_raced_a_write_is_not_kept() -> None:
    cache = Representations(ttl_s=300.0)
    token = cache.token()  # the fill starts reading
    cache.invalidate("gpu", "l4")  # a write commits meanwhile
    cache.put("gpu", "/v1/gpus/l4", Representation(b"old", '"1"'), token)
    assert cache.get("/v1/gpus/l4") is None
    cache.put("gpu", "/v1/gpus/l4", Representation(b"new", '"2"'), cache.token())
    assert cache.get("/v1/gpus/l4") == Representation(b"new", '"2"')


def test_oldest_answers_go_first_beyond_the_limit() -> None:
    cache = Representations(ttl_s=300.0, max_entries=2)
    for name in ("a", "b", "c"):
        cache.put("gpu", name, Representation(name.encode()), cache.token())
    assert [cache.get(name) is not None for name in ("a", "b", "c")] == [False, True, True]


def test_the_target_keeps_the_query() -> None:
    assert target_of("/v1/gpus", b"limit=50") == "/v1/gpus?limit=50"
    assert target_of("/v1/gpus/l4", b"") == "/v1/gpus/l4"


# notifications


def test_a_notification_drops_the_entry_unless_it_is_this_process_own() -> None:
    dropped: list[tuple[str, str]] = []
    invalidation = CatalogInvalidation()
    invalidation.add(lambda kind, entry_id: dropped.append((kind, entry_id)), lambda: None)
    invalidation.receive(f"{invalidation.origin} gpu l4-24gb")  # applied at commit already
    invalidation.receive("0123456789abcdef gpu l4-24gb")
    invalidation.receive("0123456789abcdef nonsense")
    assert dropped == [("gpu", "l4-24gb")]
    assert invalidation.received == 1


# the raw memo


def test_the_memo_keeps_within_its_bytes() -> None:
    """Answers of 1,000 bytes under a budget of 10,000 (5,000 a side): the newest fit, the
    oldest go first, and the count of bytes held is exact after replacements and drops."""
    memo = ResponseMemo(max_entries=1000, max_bytes=10_000)
    scope: dict[str, Any] = {"path": "/v1/estimates/prefill", "query_string": b""}
    for i in range(20):
        answer = bytes(1000)
        memo.put(("/p", f"body {i}", (1, 1)), answer)
        memo.put_raw(raw_key(scope, {}, f"{i}".encode()), {}, (1, 1), answer)
        assert memo.answer_bytes <= 5_000 and memo.raw_bytes <= 5_000
    assert len(memo) == 5_000 // (1000 + 6 + len("body 19") + 200)  # 4 answers fit
    assert memo.get(("/p", "body 19", (1, 1))) is not None
    assert memo.get(("/p", "body 0", (1, 1))) is None
    memo.put(("/p", "body 19", (1, 1)), bytes(10))  # replaced by a smaller one
    held = sum(
        len(key[0]) + len(key[1]) + len(answer) + 200 for key, answer in memo._answers.items()
    )
    assert memo.answer_bytes == held
    one = ResponseMemo(max_entries=10, max_bytes=100)
    one.put(("/p", "b", (1, 1)), bytes(1000))  # larger than the budget: kept alone
    assert len(one) == 1


def test_a_raw_answer_lives_only_while_its_entries_generations_do() -> None:
    memo = ResponseMemo(max_entries=8)
    scope: dict[str, Any] = {"path": "/v1/estimates/prefill", "query_string": b""}
    headers = {b"content-type": b"application/json"}
    key = raw_key(scope, headers, b'{"prompt_tokens": 1}')
    generation = [(3, 4)]

    def generations(**_refs: object) -> tuple[int, int] | None:
        return generation[0]

    memo.put_raw(key, {"model": "m", "gpu": "g"}, (3, 4), b"answer")
    assert memo.get_raw(key, generations) == b"answer"
    other = raw_key(scope, {**headers, b"accept": b"image/svg+xml"}, b'{"prompt_tokens": 1}')
    assert memo.get_raw(other, generations) is None  # another Accept is another request
    generation[0] = (5, 4)  # the model was written: its entry was filled again
    assert memo.get_raw(key, generations) is None
    assert memo.get_raw(key, lambda **_: (3, 4)) is None  # and the stale answer is gone


def test_a_repeat_is_answered_before_routing_and_current_after_a_write(
    client: TestClient,
) -> None:
    first = client.post("/v1/estimates/prefill", json=PREFILL)  # reads the catalog
    memo: ResponseMemo = client.app.state.response_memo  # type: ignore[attr-defined]
    client.post("/v1/estimates/prefill", json=PREFILL)  # computed on the cached entries
    assert memo.raw_hits == 0
    repeat = client.post("/v1/estimates/prefill", json=PREFILL)
    assert memo.raw_hits == 1
    assert repeat.content == first.content
    assert repeat.headers["content-type"] == "application/json"
    assert len(repeat.headers["x-request-id"]) == 32
    bandwidth = client.get(f"/v1/gpus/{GPU}").json()["memory_bandwidth_bytes_per_s"]
    patched = client.patch(
        f"/v1/gpus/{GPU}", json={"memory_bandwidth_bytes_per_s": bandwidth / 2}, headers=AUTH
    )
    assert patched.status_code == 200
    after = client.post("/v1/estimates/prefill", json=PREFILL)
    assert memo.raw_hits == 1  # not from the memo: the GPU's generation changed
    assert after.json()["ttft_ms"] != first.json()["ttft_ms"]
    metrics = client.get("/metrics").text
    assert (
        'ridgeline_http_requests_total{method="POST",route="/v1/estimates/prefill",'
        'status="200"}' in metrics
    )


def test_catalog_reads_are_current_at_once_after_a_write_here(client: TestClient) -> None:
    before = client.get(f"/v1/gpus/{GPU}")
    page = client.get("/v1/gpus", params={"limit": 50}).json()
    assert before.headers["etag"] == '"1"'
    cache: Representations = client.app.state.representations  # type: ignore[attr-defined]
    repeat = client.get(f"/v1/gpus/{GPU}")
    assert cache.hits == 1  # answered by the middleware, before routing
    assert repeat.content == before.content
    assert repeat.headers["etag"] == '"1"'
    assert repeat.headers["content-type"] == "application/json"
    unchanged = client.get(f"/v1/gpus/{GPU}", headers={"If-None-Match": '"1"'})
    assert unchanged.status_code == 304
    assert unchanged.headers["etag"] == '"1"'
    assert cache.hits == 2
    metrics = client.get("/metrics").text
    assert (
        'ridgeline_http_requests_total{method="GET",route="/v1/gpus/{entry_id}",status="304"}'
        in metrics
    )
    client.patch(f"/v1/gpus/{GPU}", json={"tdp_watts": 71}, headers=AUTH)
    after = client.get(f"/v1/gpus/{GPU}")
    assert after.headers["etag"] == '"2"'
    assert after.json()["tdp_watts"] == 71
    listed = client.get("/v1/gpus", params={"limit": 50}).json()
    assert [g["tdp_watts"] for g in listed["items"] if g["id"] == GPU] == [71]
    assert listed["total"] == page["total"]


# processes over one PostgreSQL database


@pytest.fixture
def database(postgres_url: str) -> str:
    upgrade(postgres_url)
    reset_database(postgres_url)
    return postgres_url


def _until(check: Callable[[], bool], limit_s: float) -> float:
    """Seconds until `check()` holds, polled every 5 ms; fails past `limit_s`."""
    started = time.perf_counter()
    while not check():
        elapsed = time.perf_counter() - started
        assert elapsed < limit_s, f"not seen within {limit_s} s"
        time.sleep(0.005)
    return time.perf_counter() - started


@pytest.mark.postgres
@pytest.mark.slow
def test_a_write_through_one_replica_reaches_the_other_within_a_second(database: str) -> None:
    """Two server processes, caches kept 300 s: only the notification can make B current."""
    with (
        served(database, catalog_cache_ttl_s="300") as (a, _),
        served(database, catalog_cache_ttl_s="300") as (b, _),
        httpx.Client(base_url=b, timeout=10) as replica_b,
    ):
        old = replica_b.get(f"/v1/gpus/{GPU}")
        old_estimate = replica_b.post("/v1/estimates/prefill", json=PREFILL).json()
        replica_b.post("/v1/estimates/prefill", json=PREFILL)  # now memoised on B
        bandwidth = old.json()["memory_bandwidth_bytes_per_s"]
        written = httpx.patch(
            f"{a}/v1/gpus/{GPU}",
            json={"memory_bandwidth_bytes_per_s": bandwidth / 2},
            headers=AUTH,
        )
        assert written.status_code == 200
        new_etag = written.headers["etag"]
        read_s = _until(
            lambda: replica_b.get(f"/v1/gpus/{GPU}").headers["etag"] == new_etag, NOTIFY_BOUND_S
        )
        estimate_s = _until(
            lambda: (
                replica_b.post("/v1/estimates/prefill", json=PREFILL).json()["ttft_ms"]
                != old_estimate["ttft_ms"]
            ),
            NOTIFY_BOUND_S,
        )
        listed = replica_b.get("/v1/gpus", params={"limit": 50}).json()["items"]
        assert [g["version"] for g in listed if g["id"] == GPU] == [2]
    assert read_s < NOTIFY_BOUND_S
    assert estimate_s < NOTIFY_BOUND_S


async def _fan_out(url: str, count: int) -> list[httpx.Response]:
    """`count` GETs at once, each on a connection of its own (so the kernel hands them to
    whichever worker process accepts first)."""

    async def one() -> httpx.Response:
        async with httpx.AsyncClient(timeout=10) as client:
            return await client.get(url)

    return list(await asyncio.gather(*(one() for _ in range(count))))


@pytest.mark.postgres
@pytest.mark.slow
def test_two_workers_serve_one_database_and_stay_current(database: str) -> None:
    """`ridgeline serve --workers 2`: both processes answer (their request ids carry different
    process prefixes), and after a write through either, both serve the new version."""
    with served(database, workers=2, catalog_cache_ttl_s="300") as (base, server):
        prefixes: set[str] = set()
        for _ in range(20):
            responses = asyncio.run(_fan_out(f"{base}/v1/gpus/{GPU}", 32))
            assert {r.status_code for r in responses} == {200}
            assert {r.headers["etag"] for r in responses} == {'"1"'}
            prefixes |= {r.headers["x-request-id"][:16] for r in responses}
            if len(prefixes) == 2:
                break
        assert len(prefixes) == 2, "one worker answered every connection"
        written = httpx.patch(f"{base}/v1/gpus/{GPU}", json={"tdp_watts": 99}, headers=AUTH)
        assert written.status_code == 200

        def all_current() -> bool:
            responses = asyncio.run(_fan_out(f"{base}/v1/gpus/{GPU}", 32))
            return {r.headers["etag"] for r in responses} == {'"2"'}

        _until(all_current, NOTIFY_BOUND_S + 2.0)  # 32 fresh connections take a while here
        responses = asyncio.run(_fan_out(f"{base}/v1/gpus/{GPU}", 32))
        assert {r.json()["tdp_watts"] for r in responses} == {99}
        server.terminate()  # the supervisor stops its workers (a kill would orphan them)
        assert server.wait(30) == 0


# the access log


@pytest.mark.parametrize(
    "path",
    [
        '/v1/gpus/"odd\\name\u00e9',  # a quote, a backslash, non-ASCII: escaped
        "/v1/gpus/h100-sxm5-80gb",  # printable ASCII: written as it is
        "/v1/gpus/tab\there\x7f",  # control characters: escaped
    ],
)
def test_access_lines_are_what_the_json_formatter_writes(path: str) -> None:
    """A batch of four: two in one millisecond (sharing its stamp), one in the next, one a
    minute on, two of them sent with a principal's key; made twice, the second time from the
    fixed parts kept the first."""
    access = logging.getLogger("ridgeline.access")
    route = "/v1/gpus/{entry_id}"
    finished: list[tuple[float, str, str, int, str, float, str, str | None]] = [
        (1_700_000_000.2501, "GET", path, 404, route, 0.000123, "abc-123", None),
        (1_700_000_000.2504, "GET", path, 404, route, 0.041007, "def-456", "alice"),
        (1_700_000_000.2512, "GET", path, 404, route, 0.0015, "ghi-789", None),
        (1_700_000_061.5, "GET", path, 404, route, 1.25, "jkl-012", "key-0a1b2c3d"),
    ]
    expected = []
    for created, method, _, status, _, elapsed_s, request_id, principal in finished:
        extra: dict[str, object] = {"route": route, "status": status}
        if principal is not None:
            extra["principal"] = principal
        extra["duration_ms"] = round(elapsed_s * 1e6) / 1e3  # as _log_record rounds it
        record = access.makeRecord(
            access.name,
            logging.INFO,
            __file__,
            0,
            "%s %s %s",
            (method, path, status),
            None,
            extra=extra,
        )
        record.created = created
        token = REQUEST_ID.set(request_id)
        try:
            expected.append(JsonFormatter().format(record) + "\n")
        finally:
            REQUEST_ID.reset(token)
    assert access_lines(finished) == "".join(expected)
    assert access_lines(finished) == "".join(expected)
    lines = [json.loads(line) for line in access_lines(finished).splitlines()]
    assert [line["time"][-12:] for line in lines] == [
        "20.250+00:00",
        "20.250+00:00",
        "20.251+00:00",
        "21.500+00:00",
    ]
    assert [line["duration_ms"] for line in lines] == [0.123, 41.007, 1.5, 1250.0]
    assert [line.get("principal") for line in lines] == [None, "alice", None, "key-0a1b2c3d"]


def test_a_timestamp_is_what_isoformat_writes_to_the_millisecond() -> None:
    """Every millisecond of a second, each 0.4 ms past it (truncated, not rounded), and the
    next second's first: the cached second and the millisecond's looked-up tail agree with
    `datetime`."""
    for created in [1_700_000_000 + ms / 1000 + 0.0004 for ms in range(1000)] + [1_700_000_001.0]:
        expected = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")
        assert iso_utc(created) == expected, created
    assert iso_utc(1_700_000_000.9994) == "2023-11-14T22:13:20.999+00:00"


def _access_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [line for line in lines if line["logger"] == "ridgeline.access"]


@contextmanager
def plain_logging() -> Iterator[io.StringIO]:
    """The handler `configure_logging` installs, alone on the root logger, writing to the
    stream given. In the test's body: pytest adds its own handlers as the test starts."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    handlers, level = root.handlers, root.level
    root.handlers = [handler]
    root.setLevel(logging.INFO)  # (setLevel also clears the loggers' cached levels)
    try:
        yield stream
    finally:
        root.handlers = handlers
        root.setLevel(level)


def test_access_lines_are_written_in_batches_to_the_configured_handler(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the handler `configure_logging` installs, lines wait for their batch's time (50
    ms; 1 s here, so that three requests surely fit in it on a loaded machine) and are written
    together."""
    monkeypatch.setattr(request_log, "_FLUSH_S", 1.0)
    with plain_logging() as stream:
        ids = [client.get("/healthz").headers["x-request-id"] for _ in range(3)]
        assert _access_lines(stream) == []  # not yet: they wait for the batch
        deadline = time.monotonic() + 5
        while len(_access_lines(stream)) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    access = _access_lines(stream)
    assert [line["request_id"] for line in access] == ids
    assert {line["route"] for line in access} == {"/healthz"}
    assert all(line["status"] == 200 and line["duration_ms"] > 0 for line in access)
    assert all("principal" not in line for line in access)  # no key sent


def test_a_keyed_request_logs_its_principals_name_never_its_key(client: TestClient) -> None:
    """The test key is a bare key: an admin named by 8 hex digits of its SHA-256."""
    with plain_logging() as stream:
        client.get("/v1/plans", headers=AUTH)
        deadline = time.monotonic() + 5
        while not _access_lines(stream) and time.monotonic() < deadline:
            time.sleep(0.01)
    (line,) = [line for line in _access_lines(stream) if line["route"] == "/v1/plans"]
    name = "key-" + hashlib.sha256(TEST_API_KEY.encode()).hexdigest()[:8]
    assert line["principal"] == name
    assert TEST_API_KEY not in stream.getvalue()


def _healthz_count(metrics: str) -> float:
    prefix = 'ridgeline_http_requests_total{method="GET",route="/healthz",status="200"} '
    lines = [line for line in metrics.splitlines() if line.startswith(prefix)]
    return float(lines[0].removeprefix(prefix)) if lines else 0.0


def test_a_scrape_counts_requests_whose_batch_still_waits(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests are observed with their batch, and a scrape settles the batch first."""
    monkeypatch.setattr(request_log, "_FLUSH_S", 60.0)  # no batch settles on time here
    before = _healthz_count(client.get("/metrics").text)
    with plain_logging() as stream:
        ids = [client.get("/healthz").headers["x-request-id"] for _ in range(3)]
        metrics = client.app.state.metrics  # type: ignore[attr-defined]
        assert metrics.observed("GET", "/healthz", 200) == before  # they wait
        assert _access_lines(stream) == []
        assert _healthz_count(client.get("/metrics").text) == before + 3
        assert [line["request_id"] for line in _access_lines(stream)] == ids


# one fill at a time


def _request(cache: Representations, path: str) -> Any:
    """What `cached_read` reads of a request: the app's cache and sessions, and the target."""
    state = SimpleNamespace(representations=cache, session_factory=lambda: nullcontext(None))
    return SimpleNamespace(
        app=SimpleNamespace(state=state), scope={"path": path, "query_string": b""}
    )


def test_requests_that_miss_together_share_one_read() -> None:
    cache = Representations(ttl_s=300.0)
    reads: list[int] = []

    def read(_session: object) -> Representation:
        reads.append(1)
        time.sleep(0.05)
        return Representation(b"{}", '"1"')

    async def many() -> list[Representation]:
        request = _request(cache, "/v1/gpus/l4")
        return list(await asyncio.gather(*(cached_read(request, "gpu", read) for _ in range(8))))

    answers = asyncio.run(many())
    assert len(reads) == 1
    assert {a.body for a in answers} == {b"{}"}
    assert cache.filling == {}


def test_a_read_after_a_write_never_joins_a_fill_begun_before_it() -> None:
    cache = Representations(ttl_s=300.0)
    bodies = iter([b"old", b"new"])

    def read(_session: object) -> Representation:
        time.sleep(0.05)
        return Representation(next(bodies), None)

    async def around_a_write() -> tuple[Representation, Representation]:
        request = _request(cache, "/v1/gpus")
        before = asyncio.ensure_future(cached_read(request, "gpu", read))
        await asyncio.sleep(0.01)  # its read is under way
        cache.invalidate("gpu", "l4")  # a write commits
        after = await cached_read(request, "gpu", read)
        return await before, after

    before, after = asyncio.run(around_a_write())
    assert (before.body, after.body) == (b"old", b"new")
    assert cache.get("/v1/gpus") == Representation(b"new", None)


def test_json_strings_are_the_encoders_for_every_ascii_character() -> None:
    for code in range(128):
        text = f"/a{chr(code)}b"
        assert _json_string(text) == json.dumps(text), repr(text)
