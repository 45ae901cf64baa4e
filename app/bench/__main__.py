"""`python -m app.bench`: the benchmark job's command line (see `app.bench.cli`)."""

from app.bench.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
