"""Service settings, read from `RIDGELINE_*` environment variables (or a `.env` file).

Settings are validated once, at start: a production deployment without API keys, or with a
placeholder key, refuses to start rather than run open.
"""

from __future__ import annotations

import os
from enum import StrEnum
from functools import lru_cache
from typing import Annotated

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.principals import parse_keys

__all__ = ["Environment", "Settings", "get_settings"]

_PLACEHOLDER_KEYS = {"changeme", "change-me", "secret", "password", "test", "dev", "api-key"}
_MIN_PRODUCTION_KEY_LENGTH = 16


class Environment(StrEnum):
    DEVELOPMENT = "development"
    PRODUCTION = "production"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RIDGELINE_", env_file=".env", extra="ignore")

    environment: Environment = Field(
        default=Environment.DEVELOPMENT,
        description="`production` refuses to start without strong API keys.",
    )
    database_url: str = Field(
        default="sqlite:///./ridgeline.db",
        description="SQLAlchemy URL: a SQLite file, or postgresql+psycopg://… in production.",
    )
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "Comma-separated API keys (Bearer token or X-API-Key), each `name:role:key` (role "
            "read, write or admin) or a bare key (an admin; app.principals)."
        ),
    )
    log_level: str = Field(default="INFO", description="Python logging level name.")
    max_body_bytes: int = Field(
        default=2 * 2**20, gt=0, description="Larger request bodies get 413 before parsing."
    )
    catalog_cache_ttl_s: float = Field(
        default=5.0,
        ge=0,
        description=(
            "How long this process may keep a catalog entry, answer or estimate it read. Writes "
            "through this process invalidate at once, through another replica on PostgreSQL "
            "within milliseconds (LISTEN/NOTIFY); this bounds the rest (SQLite, a listener "
            "reconnecting)."
        ),
    )
    response_memo_entries: int = Field(
        default=4096,
        ge=0,
        description="Estimate answers remembered for repeated identical requests (0: none).",
    )
    response_memo_mib: int = Field(
        default=32,
        ge=1,
        description="Bytes those answers may take, with their keys and bodies, in MiB.",
    )
    worker_threads: int = Field(
        default=8,
        ge=1,
        le=256,
        description="Threads for blocking work (database reads and writes, plans) per process.",
    )
    opentelemetry: bool = Field(
        default=False,
        description=(
            "FastAPI's own OpenTelemetry spans, metrics and logs, sent to the providers the "
            "process configures. Off: Ridgeline's Prometheus metrics and JSON access log cover "
            "every request, and checking for providers costs each request ~8 µs."
        ),
    )
    load_catalog_on_start: bool = Field(
        default=False, description="Load the bundled catalog when the app starts (make run does)."
    )
    warm_on_start: bool = Field(
        default=True,
        description=(
            "Before serving, answer one decode estimate on each GPU with a profile of its own "
            "(up to 8 profiles parsed), so the first requests after /readyz find them ready "
            "(app.estimates.warm)."
        ),
    )
    db_pool_timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=60,
        description="Longest wait for a free database connection before a 503 `busy`.",
    )
    db_lock_timeout_ms: int = Field(
        default=5_000,
        ge=1,
        le=600_000,
        description="PostgreSQL `lock_timeout`: a row lock not granted by then is a 503 `busy`.",
    )
    db_statement_timeout_ms: int = Field(
        default=30_000,
        ge=1,
        le=3_600_000,
        description="PostgreSQL `statement_timeout`: no statement runs longer.",
    )
    db_idle_in_transaction_timeout_ms: int = Field(
        default=30_000,
        ge=1,
        le=3_600_000,
        description=(
            "PostgreSQL `idle_in_transaction_session_timeout`: a session left idle inside a "
            "transaction is ended, so a lost client can never hold a row lock."
        ),
    )
    sqlite_busy_timeout_ms: int = Field(
        default=5_000,
        ge=0,
        le=600_000,
        description="How long a SQLite writer waits for the database lock before a 503 `busy`.",
    )
    readiness_timeout_s: float = Field(
        default=0.8,
        gt=0,
        le=10,
        description="`/readyz` answers within this (503 when the database did not).",
    )
    graceful_shutdown_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description=(
            "`ridgeline serve`: after SIGTERM, requests in flight get this long, then the "
            "process exits (uvicorn's --timeout-graceful-shutdown)."
        ),
    )
    heavy_work_processes: int = Field(
        default_factory=lambda: max(1, (os.cpu_count() or 2) - 1),
        ge=1,
        le=256,
        description=(
            "Worker processes for CPU-heavy work (simulations, plans, charts), at a lower "
            "scheduling priority than the API; default one fewer than the CPUs (at least one)."
        ),
    )
    heavy_work_queue: int = Field(
        default=2,
        ge=0,
        le=1024,
        description="Heavy jobs that may wait for a free worker; beyond them a 429.",
    )
    heavy_work_timeout_s: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="A heavy job still running after this is stopped (503).",
    )
    heavy_work_memory_bytes: int = Field(
        default=4 * 2**30,
        ge=2**28,
        description="Address-space limit of each heavy-work process.",
    )

    plan_wait_s: float = Field(
        default=2.0,
        ge=0,
        le=60,
        description=(
            "`POST /v1/plans` answers 201 with the plan when it is done within this, else 202 "
            "with its `Location` to poll."
        ),
    )
    plan_workers: int = Field(
        default=1,
        ge=0,
        le=64,
        description=(
            "Plans this process runs at once, each in a heavy-work process (on PostgreSQL, a "
            "procrastinate worker on the `plans` queue); 0: it runs none (run `ridgeline "
            "worker` processes instead)."
        ),
    )
    plan_queue_limit: int = Field(
        default=100,
        ge=1,
        le=100_000,
        description="Plans that may be queued or running at once; beyond them a 429.",
    )
    plan_poll_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description=(
            "How often an idle plan worker looks for plans queued by other processes (on "
            "PostgreSQL a fallback: LISTEN/NOTIFY wakes procrastinate's workers at once), and "
            "for plans to abort."
        ),
    )
    plan_lease_s: float = Field(
        default=30.0,
        ge=1,
        le=3600,
        description=(
            "A plan worker silent for this long is presumed dead and its plan restarted by "
            "another: on PostgreSQL no procrastinate heartbeat (sent every third of this; "
            "stalled jobs are looked for every half), on SQLite no lease renewed."
        ),
    )
    plan_max_attempts: int = Field(
        default=3,
        ge=1,
        le=100,
        description="Starts of one plan before it fails (each worker died running it).",
    )
    plan_progress_interval_s: float = Field(
        default=0.5,
        gt=0,
        le=60,
        description="Least time between two progress writes (and cancellation checks) of a plan.",
    )

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        if isinstance(value, str):
            return [key.strip() for key in value.split(",") if key.strip()]
        return value

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.upper()
        if level not in {"CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"}:
            raise ValueError(f"unknown log level {value!r}")
        return level

    @model_validator(mode="after")
    def _production_needs_keys(self) -> Settings:
        principals = parse_keys(self.api_keys)  # ValueError naming a malformed entry
        if self.environment is Environment.PRODUCTION:
            if not self.api_keys:
                raise ValueError("RIDGELINE_API_KEYS must be set in production")
            for key in principals:
                if key.lower() in _PLACEHOLDER_KEYS or len(key) < _MIN_PRODUCTION_KEY_LENGTH:
                    raise ValueError(
                        "RIDGELINE_API_KEYS holds a placeholder or a key shorter than "
                        f"{_MIN_PRODUCTION_KEY_LENGTH} characters"
                    )
        return self


@lru_cache
def get_settings() -> Settings:
    """The process's settings; tests build their own `Settings` and pass them to `create_app`."""
    return Settings()
