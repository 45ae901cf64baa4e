"""Service settings, read from `RIDGELINE_*` environment variables (or a `.env` file).

Settings are validated once, at start: a production deployment without API keys, or with a
placeholder key, refuses to start rather than run open.
"""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache
from typing import Annotated

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

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
        description="Comma-separated keys accepted for writes (Bearer token or X-API-Key).",
    )
    log_level: str = Field(default="INFO", description="Python logging level name.")
    max_body_bytes: int = Field(
        default=2 * 2**20, gt=0, description="Larger request bodies get 413 before parsing."
    )
    catalog_cache_ttl_s: float = Field(
        default=5.0,
        ge=0,
        description=(
            "How long an estimate may use a catalog entry read by this process. Writes through "
            "this process invalidate at once; writes through another replica are seen within it."
        ),
    )
    response_memo_entries: int = Field(
        default=4096,
        ge=0,
        description="Estimate answers remembered for repeated identical requests (0: none).",
    )
    worker_threads: int = Field(
        default=8,
        ge=1,
        le=256,
        description="Threads for blocking work (database reads and writes, plans) per process.",
    )
    load_catalog_on_start: bool = Field(
        default=False, description="Load the bundled catalog when the app starts (make run does)."
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
        if self.environment is Environment.PRODUCTION:
            if not self.api_keys:
                raise ValueError("RIDGELINE_API_KEYS must be set in production")
            for key in self.api_keys:
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
