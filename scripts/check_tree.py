"""The repository holds only files it means to: every tracked path is made of plain name
characters, and the root holds only the project's own files. Run by `make test` (a stray file
such as a shell command's mistyped redirection, `hat setup.py compiled (...)#`, fails it).

Usage: python scripts/check_tree.py   (exit 1 and one line per problem)
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterable

ROOT_FILES = frozenset(
    {
        ".dockerignore",
        ".gitignore",
        "Dockerfile",
        "Makefile",
        "README.md",
        "alembic.ini",
        "pyproject.toml",
        "setup.py",
    }
)
"""The files the repository's root may hold (directories are not listed: any may)."""
_PLAIN = re.compile(r"[A-Za-z0-9._+-]+")


def problems(paths: Iterable[str]) -> list[str]:
    """What is wrong with these tracked paths (relative, `/`-separated), one line each."""
    found = []
    for path in paths:
        parts = path.split("/")
        if not all(_PLAIN.fullmatch(part) for part in parts):
            found.append(f"{path!r}: a name outside [A-Za-z0-9._+-]")
        elif len(parts) == 1 and path not in ROOT_FILES:
            found.append(f"{path!r}: not one of the root's files ({', '.join(sorted(ROOT_FILES))})")
    return found


def main() -> int:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], check=True, capture_output=True, text=True
    ).stdout
    found = problems(path for path in listed.split("\0") if path)
    for line in found:
        print(f"check_tree: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
