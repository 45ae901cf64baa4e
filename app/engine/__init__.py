"""The pure model: specs in, numbers out; no web framework, database or I/O."""

# First: which build of the compiled modules runs (see _native), before anything imports them.
from app.engine import _native  # noqa: F401
