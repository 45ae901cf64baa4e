"""procrastinate's job queue schema, on PostgreSQL (plan jobs)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 21:00:00.000000

On PostgreSQL, plan jobs travel through procrastinate (`app.plans.queue`), whose tables,
types, functions and triggers are created here from the library's own schema, as shipped with
the pinned release (`migrations/sql/procrastinate-3.10.0.sql`, its `sql/schema.sql`, unchanged;
tests/api/test_migrations.py checks it is the installed release's). A later release of
procrastinate comes with a migration of ours applying its `sql/migrations` files in between.
SQLite needs none of it: plans run in-process there.

Procrastinate's tables are not in `Base.metadata` (the library owns them); Alembic's
comparison of models and database leaves them out (`app.plans.queue.procrastinate_owns`).
"""

import re
from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = Path(__file__).resolve().parents[1] / "sql" / "procrastinate-3.10.0.sql"
TABLES = (
    "procrastinate_events",
    "procrastinate_periodic_defers",
    "procrastinate_jobs",
    "procrastinate_workers",
)
TYPES = (
    "procrastinate_job_to_defer_v1",
    "procrastinate_job_event_type",
    "procrastinate_job_status",
)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    # Straight to psycopg, in Alembic's transaction: many statements, no parameters (its `%`s
    # are text, not placeholders).
    psycopg = bind.connection.driver_connection
    if psycopg is None:
        raise RuntimeError("migration 0010 needs an open database connection")
    psycopg.execute(SCHEMA.read_text(encoding="utf-8"))


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    # Tables first, with what hangs on them (triggers, functions returning their rows), then
    # the other functions the schema creates, then its types.
    functions = re.findall(r"^CREATE FUNCTION (\w+)\(", SCHEMA.read_text(encoding="utf-8"), re.M)
    op.execute(f"DROP TABLE IF EXISTS {', '.join(TABLES)} CASCADE")
    for name in functions:
        op.execute(f"DROP FUNCTION IF EXISTS {name}")
    op.execute(f"DROP TYPE IF EXISTS {', '.join(TYPES)}")
