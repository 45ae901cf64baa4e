"""Units, defined once. Every quantity in the engine is in SI base units (bytes, FLOP, seconds)
unless its name says otherwise (`_ms`)."""

from typing import Final

__all__ = ["GB", "GIB", "KIB", "MB", "MIB", "MS_PER_S", "TB", "US_PER_S"]

KIB: Final = 2**10
MIB: Final = 2**20
GIB: Final = 2**30
MB: Final = 10**6
GB: Final = 10**9
TB: Final = 10**12
MS_PER_S: Final = 1_000.0
US_PER_S: Final = 1_000_000.0
