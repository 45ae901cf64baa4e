"""Measured step time: profiles of GPUs under serving engines, and the step timer built on them."""

from app.engine.profiles.grid import Curve, Grid
from app.engine.profiles.profile import (
    AttentionTable,
    EngineOverhead,
    OpFamily,
    Profile,
    uniform_basis,
)
from app.engine.profiles.timer import ProfiledStepCost

__all__ = [
    "AttentionTable",
    "Curve",
    "EngineOverhead",
    "Grid",
    "OpFamily",
    "Profile",
    "ProfiledStepCost",
    "uniform_basis",
]
