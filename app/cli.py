"""`ridgeline` command: database migrations, catalog load, OpenAPI export.

ridgeline serve [--host 127.0.0.1] [--port 8000] [--workers 1]
ridgeline worker [--concurrency 1]
ridgeline migrate [--revision head]
ridgeline load-catalog
ridgeline openapi [--out openapi/openapi.json]
ridgeline import-profiles aiconfigurator --all | --system h100_sxm --backend vllm [--version V]
    [--systems-dir DIR] [--out app/catalog/data/profiles] [--default]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from app.bundled import load_bundled_catalog
from app.catalog.invalidation import watch_catalog
from app.db.migrate import upgrade
from app.db.session import make_engine, make_session_factory
from app.engine.serving import PROFILED_ENGINES
from app.settings import get_settings

__all__ = ["main", "openapi_document"]


def _migrate(args: argparse.Namespace) -> int:
    url = get_settings().database_url
    upgrade(url, args.revision)
    print(f"migrated {url} to {args.revision}")
    return 0


def _load_catalog(_args: argparse.Namespace) -> int:
    url = get_settings().database_url
    engine = make_engine(url)
    try:
        sessions = make_session_factory(engine)
        watch_catalog(sessions, url)  # on PostgreSQL, serving replicas drop what it changed
        with sessions.begin() as session:
            report = load_bundled_catalog(session)
    finally:
        engine.dispose()
    for kind, outcomes in report.items():
        summary = ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items()))
        print(f"{kind}: {summary}")
    return 0


def openapi_document() -> str:
    """The served OpenAPI document, serialised exactly as committed in openapi/openapi.json."""
    from app.main import create_app  # noqa: PLC0415  (the web app is only needed here)

    return json.dumps(create_app().openapi(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _openapi(args: argparse.Namespace) -> int:
    text = openapi_document()
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn  # noqa: PLC0415  (only the server needs it)

    settings = get_settings()
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        access_log=False,  # the app logs every request itself, as JSON
        proxy_headers=args.proxy_headers,
        forwarded_allow_ips=args.forwarded_allow_ips,
        timeout_graceful_shutdown=int(settings.graceful_shutdown_s),
        # Long request targets reach the app, which answers 414 in its own problem format.
        h11_max_incomplete_event_size=_MAX_REQUEST_HEAD_BYTES,
        log_config=None,  # the app configures logging (JSON lines)
    )
    return 0


_MAX_REQUEST_HEAD_BYTES = 1 << 20


def _worker(args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415  (only the worker needs these)

    from app.logs import configure_logging  # noqa: PLC0415
    from app.main import heavy_work_limits  # noqa: PLC0415
    from app.plans.jobs import worker_limits  # noqa: PLC0415
    from app.plans.queue import run_worker  # noqa: PLC0415
    from app.web.heavy import HeavyWork  # noqa: PLC0415

    settings = get_settings()
    configure_logging(settings.log_level)
    concurrency = args.concurrency
    limits = heavy_work_limits(settings)
    # One heavy-work process per plan at once: planning is all this process does.
    heavy = HeavyWork(replace(limits, processes=concurrency, queue=0))
    asyncio.run(run_worker(settings, heavy, worker_limits(settings, concurrency)))
    return 0


def _import_profiles(args: argparse.Namespace) -> int:
    from app.profiles.bundled import (  # noqa: PLC0415 - needs the extra
        write_all_bundled,
        write_bundled_profile,
    )

    systems = Path(args.systems_dir) if args.systems_dir else None
    if args.all:
        paths = write_all_bundled(systems, out=Path(args.out))
        print(f"wrote {len(paths)} profiles and the index to {args.out}")
        return 0
    if args.system is None or args.backend is None:
        raise SystemExit("ridgeline import-profiles: give --all, or --system and --backend")
    path = write_bundled_profile(
        args.system,
        args.backend,
        version=args.version,
        systems=systems,
        out=Path(args.out),
        default=args.default,
    )
    print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ridgeline", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve the API (uvicorn; SIGTERM drains requests for RIDGELINE_GRACEFUL_SHUTDOWN_S)",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--workers", type=int, default=1, help="server processes (each with its own pools)"
    )
    serve.add_argument("--proxy-headers", action="store_true", help="trust X-Forwarded-*")
    serve.add_argument("--forwarded-allow-ips", default="127.0.0.1")
    serve.set_defaults(run=_serve)
    worker = commands.add_parser(
        "worker",
        help="run queued plans (RIDGELINE_DATABASE_URL's: procrastinate's plans queue on "
        "PostgreSQL) until SIGTERM, which puts the plans running here back in the queue",
    )
    worker.add_argument("--concurrency", type=int, default=1, help="plans run at once")
    worker.set_defaults(run=_worker)
    migrate = commands.add_parser("migrate", help="upgrade the database schema")
    migrate.add_argument("--revision", default="head")
    migrate.set_defaults(run=_migrate)
    load = commands.add_parser("load-catalog", help="load the bundled GPU and model catalog")
    load.set_defaults(run=_load_catalog)
    openapi = commands.add_parser("openapi", help="write the OpenAPI document")
    openapi.add_argument("--out", default="openapi/openapi.json")
    openapi.set_defaults(run=_openapi)
    profiles = commands.add_parser(
        "import-profiles",
        help="write a compact profile from a silicon database (needs ridgeline[profiles])",
    )
    profiles.add_argument("source", choices=["aiconfigurator"])
    profiles.add_argument(
        "--all",
        action="store_true",
        help="every catalog GPU's system, engine and version in the database (what is bundled)",
    )
    profiles.add_argument("--system", help="e.g. h100_sxm, a100_sxm, l40s")
    profiles.add_argument("--backend", choices=PROFILED_ENGINES)
    profiles.add_argument("--version", default=None, help="default: the newest in the database")
    profiles.add_argument("--systems-dir", default=None, help="default: the installed package's")
    profiles.add_argument("--out", default="app/catalog/data/profiles")
    profiles.add_argument("--default", action="store_true", help="the GPU's default profile")
    profiles.set_defaults(run=_import_profiles)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    raise SystemExit(main())
