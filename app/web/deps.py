"""Request-scoped dependencies: the session, the caller's key, the If-Match precondition."""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Annotated, Any, Protocol, TypeVar

from fastapi import Depends, Header, Query, Request, Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from app.catalog.representations import Representation, Representations, target_of
from app.catalog.service import ANY_VERSION, Precondition
from app.catalog.spec_cache import NotCached, SpecCache
from app.principals import PRINCIPAL, Principal, Role, parse_keys, principal_of
from app.settings import Settings
from app.web.heavy import HeavyWork
from app.web.memo import ResponseMemo, raw_key
from app.web.problems import ApiProblem, is_sqlite_busy
from app.web.schemas import MAX_BIGINT, NO_NUL

__all__ = [
    "ApiKeyDep",
    "HeavyWorkDep",
    "IfMatchDep",
    "LimitQuery",
    "OffsetQuery",
    "OptionalApiKeyDep",
    "SettingsDep",
    "SpecCacheDep",
    "cached_page",
    "cached_read",
    "etag_for",
    "json_response",
    "memoized_answer",
    "not_modified",
    "read_in_session",
    "read_json",
    "require_api_key",
    "write_in_session",
]

T = TypeVar("T")
W = TypeVar("W")
_BUSY_ATTEMPTS = 3
_BUSY_BACKOFF_S = 0.05
# entity-tag = [ weak ] opaque-tag; opaque-tag = DQUOTE *etagc DQUOTE (RFC 9110 8.8.3).
_ENTITY_TAG = re.compile(r'^[ \t]*(W/)?"([\x21\x23-\x7e\x80-\xff]*)"[ \t]*$')


# Trivial dependencies are `async def`: FastAPI would run a plain `def` in the thread pool.
async def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_spec_cache(request: Request) -> SpecCache:
    cache: SpecCache = request.app.state.spec_cache
    return cache


LimitQuery = Annotated[int, Query(ge=1, le=500, description="Page size.")]
OffsetQuery = Annotated[int, Query(ge=0, le=10**6, description="Entries to skip.")]


def text_filter(description: str, *, max_length: int = 64, example: str | None = None) -> Any:
    """A text query parameter: no NUL (nothing stored holds one), at most `max_length`."""
    examples = None if example is None else [example]
    return Query(pattern=NO_NUL, max_length=max_length, description=description, examples=examples)


def count_filter(description: str) -> Any:
    """A non-negative whole-number query parameter that fits a BIGINT column."""
    return Query(ge=0, le=MAX_BIGINT, description=description)


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
SpecCacheDep = Annotated[SpecCache, Depends(get_spec_cache)]


_BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="`Authorization: Bearer <key>`, a key of `RIDGELINE_API_KEYS`.",
)
_API_KEY_HEADER = APIKeyHeader(
    name="X-API-Key",
    auto_error=False,
    scheme_name="apiKey",
    description="`X-API-Key: <key>`, the same keys as the bearer scheme.",
)


async def caller(
    request: Request,
    settings: SettingsDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
    api_key: Annotated[str | None, Depends(_API_KEY_HEADER)],
) -> Principal | None:
    """The principal of the caller's key (`Authorization: Bearer <key>` or `X-API-Key:
    <key>`), None when it sent none; 403 when it is not one of `RIDGELINE_API_KEYS`. Its name
    goes to the access log (`request.state.principal`), never the key."""
    key = bearer.credentials.strip() if bearer is not None else api_key
    if not key:
        return None
    principal = principal_of(key, _principals(settings))
    if principal is None:
        raise ApiProblem(403, "forbidden", "That API key is not accepted here.")
    request.state.principal = principal.name
    return principal


def _principals(settings: Settings) -> dict[str, Principal]:
    return _parsed(tuple(settings.api_keys))


@lru_cache(maxsize=16)
def _parsed(entries: tuple[str, ...]) -> dict[str, Principal]:
    return parse_keys(list(entries))


def _unauthenticated() -> ApiProblem:
    return ApiProblem(
        401,
        "unauthenticated",
        "This needs an API key: send Authorization: Bearer <key> or X-API-Key: <key>.",
        headers={"WWW-Authenticate": 'Bearer realm="ridgeline"'},
    )


async def require_reader(principal: Annotated[Principal | None, Depends(caller)]) -> Principal:
    """The caller's principal, any role; 401 without a key."""
    if principal is None:
        raise _unauthenticated()
    return principal


async def require_api_key(principal: Annotated[Principal | None, Depends(caller)]) -> Principal:
    """The caller's principal, allowed to write; 401 without a key, 403 for a read-only one."""
    if principal is None:
        raise _unauthenticated()
    if not principal.may(Role.WRITE):
        raise ApiProblem(403, "forbidden", f"{principal.name}'s key is read-only.")
    return principal


ApiKeyDep = Annotated[Principal, Depends(require_api_key)]
"""A caller allowed to write (role write or admin)."""
ReaderDep = Annotated[Principal, Depends(require_reader)]
"""A caller with a key of any role."""
OptionalApiKeyDep = Annotated[Principal | None, Depends(caller)]
"""The caller's principal or None: open routes that allow more work to callers with a key."""


async def get_heavy_work(request: Request) -> HeavyWork:
    heavy: HeavyWork = request.app.state.heavy_work
    return heavy


HeavyWorkDep = Annotated[HeavyWork, Depends(get_heavy_work)]


async def parse_if_match(
    if_match: Annotated[
        str | None,
        Header(
            description=(
                'The ETag you read (e.g. `"3"`), a list of them, or `*`. One that does not name '
                "the current version gets 412, so two writers never overwrite each other "
                "unknowingly."
            ),
        ),
    ] = None,
) -> Precondition | None:
    """What `If-Match` asks (RFC 9110 section 13.1.1), or None without the header. Strong
    ETags of digits name versions; any other well-formed entity-tag (`"abc"`, weak `W/"3"`)
    names none, so it fails the precondition (412). A value that is not a list of entity-tags
    at all (`abc`, `null`) is a 400."""
    if if_match is None:
        return None
    if if_match.strip() == "*":
        return ANY_VERSION
    versions = set()
    for tag in if_match.split(","):
        match = _ENTITY_TAG.match(tag)
        if match is None:
            shown = if_match if len(if_match) <= 80 else if_match[:80] + "..."
            raise ApiProblem(
                400,
                "bad-etag",
                f'If-Match {shown!r} is not a list of quoted entity-tags such as "3".',
            )
        weak, opaque = match.group(1), match.group(2)
        if not weak and opaque.isdigit() and len(opaque) <= 18:
            versions.add(int(opaque))
    return Precondition(frozenset(versions))


IfMatchDep = Annotated[Precondition | None, Depends(parse_if_match)]


def etag_for(version: int) -> str:
    """The strong ETag of an entry at `version` (`"3"`): what `If-Match` names to write it."""
    return f'"{version}"'


async def read_in_session(request: Request, read: Callable[[Session], T]) -> T:
    """Run `read` with a session of its own in the thread pool: one hop for a read that
    would otherwise take three (a session dependency's enter and exit, and the route)."""

    def run() -> T:
        with request.app.state.session_factory() as session:
            return read(session)

    return await run_in_threadpool(run)


async def read_json(request: Request, read: Callable[[Session], BaseModel]) -> Response:
    """The JSON of the answer `read` builds with a session of its own, in one thread-pool hop
    (reading, shaping and serialising all happen there, off the event loop)."""

    def answer(session: Session) -> bytes:
        return read(session).model_dump_json().encode()

    return Response(await read_in_session(request, answer), media_type="application/json")


async def cached_read(
    request: Request, kind: str, read: Callable[[Session], Representation]
) -> Representation:
    """The answer kept for this request's target (`app.catalog.representations`), else the
    one `read` builds with a session of its own in the thread pool, kept for the next request
    to the same target until a write of catalog `kind` commits. Errors `read` raises (a 404)
    are not kept."""
    cache: Representations = request.app.state.representations
    target = target_of(request.scope["path"], request.scope["query_string"])
    answer = cache.get(target)
    if answer is not None:
        return answer
    # One fill per target at a time: when an answer expires under load, the requests that
    # miss it wait for one read instead of each reading (and serialising) the same rows. Only
    # a fill begun since the last invalidation is joined, so a read that follows a write
    # never gets an answer read before it.
    token = cache.token()
    key = (target, token)
    while (filling := cache.filling.get(key)) is not None:
        try:
            return await asyncio.shield(filling)
        except asyncio.CancelledError:
            if not filling.cancelled():  # this request was cancelled, not the fill
                raise
    filling = asyncio.get_running_loop().create_future()
    filling.add_done_callback(_retrieved)
    cache.filling[key] = filling
    try:
        answer = await read_in_session(request, read)
        route = getattr(request.scope.get("route"), "path", "")
        answer = Representation(answer.body, answer.etag, route)
        cache.put(kind, target, answer, token)
        filling.set_result(answer)
        return answer
    except Exception as error:  # a 404: those waiting get it too
        filling.set_exception(error)
        raise
    finally:
        if not filling.done():  # cancelled (the client left): the others read for themselves
            filling.cancel()
        if cache.filling.get(key) is filling:
            del cache.filling[key]


def _retrieved(future: asyncio.Future[Representation]) -> None:
    """Mark a fill's error as seen (asyncio logs errors nobody awaited)."""
    if not future.cancelled():
        future.exception()


async def cached_page(
    request: Request, kind: str, read: Callable[[Session], BaseModel]
) -> Response:
    """A list page of catalog `kind`, kept as `cached_read` keeps answers."""

    def page(session: Session) -> Representation:
        return Representation(read(session).model_dump_json().encode())

    answer = await cached_read(request, kind, page)
    return Response(answer.body, media_type="application/json")


async def write_in_session(
    request: Request, write: Callable[[Session], W], present: Callable[[W], T]
) -> T:
    """Run `write` in a transaction of its own, commit it, and `present` what it returned: all
    in one thread-pool hop, so no transaction (and no row lock) is ever held open while the
    request waits for a thread. Rolled back when `write` raises. (What listens to commits, the
    spec cache among them, is registered on the session factory.)

    A write that SQLite refuses because another writer holds the database past its busy timeout
    is retried from the start (the transaction was rolled back, nothing of it stands) a few
    times with backoff; then it is a 503 `busy` (`app.web.problems`)."""
    factory = request.app.state.session_factory
    # Whose key the write came with (`caller`), for what records its author (catalog history).
    principal = getattr(request.state, "principal", None)

    def run() -> T:
        for attempt in itertools.count():
            try:
                with factory() as session:
                    try:
                        if principal is not None:
                            session.info[PRINCIPAL] = principal
                        result = write(session)
                        session.commit()
                    except BaseException:
                        session.rollback()
                        raise
            except OperationalError as error:
                if attempt + 1 >= _BUSY_ATTEMPTS or not is_sqlite_busy(error):
                    raise
                time.sleep(_BUSY_BACKOFF_S * 2**attempt)
                continue
            return present(result)
        raise AssertionError("unreachable")  # pragma: no cover

    return await run_in_threadpool(run)


def json_response(
    payload: BaseModel, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """`payload` serialised by pydantic-core, as the route's declared `response_model` would."""
    return Response(
        payload.model_dump_json(), status_code, headers=headers, media_type="application/json"
    )


def not_modified(if_none_match: str | None, etag: str) -> bool:
    """True when `If-None-Match` names `etag` (or `*`): the client's copy is current."""
    if if_none_match is None:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
    return "*" in tags or etag in tags


class EstimateBody(Protocol):
    def refs(self) -> dict[str, object]: ...

    def model_dump_json(self) -> str: ...


async def memoized_answer(
    request: Request, body: EstimateBody, produce: Callable[[], bytes]
) -> Response:
    """The JSON answer to `body`: from the response memo when the same question was answered
    with the same catalog entries; else `produce()`d (the answer's JSON) and remembered.
    `produce` runs on the event loop when every entry it names is cached (pure computation, no
    I/O), else in the thread pool, where it may read the database."""
    cache: SpecCache = request.app.state.spec_cache
    memo: ResponseMemo = request.app.state.response_memo
    refs = body.refs()
    generations = cache.generations(**refs)
    payload = None
    key = None
    if generations is not None:
        if memo.enabled:
            key = (request.scope["path"], body.model_dump_json(), generations)
            hit = memo.get(key)
            if hit is not None:
                await _remember_raw(request, memo, refs, generations, hit)
                return Response(hit, media_type="application/json")
        try:
            with cache.cached_only():
                payload = produce()
        except NotCached:  # an entry expired or was dropped meanwhile: never read it here
            key = None
    if payload is None:
        payload = await run_in_threadpool(produce)
    if key is not None and generations is not None:
        memo.put(key, payload)
        await _remember_raw(request, memo, refs, generations, payload)
    return Response(payload, media_type="application/json")


async def _remember_raw(
    request: Request,
    memo: ResponseMemo,
    refs: dict[str, object],
    generations: tuple[int, int],
    payload: bytes,
) -> None:
    """Keep `payload` under the request as received too, for the middleware to answer a
    byte-identical repeat before routing (`app.web.memo`)."""
    if not memo.enabled:
        return
    headers = dict(request.scope["headers"])
    memo.put_raw(raw_key(request.scope, headers, await request.body()), refs, generations, payload)
