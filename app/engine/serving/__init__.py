"""Serving engines as values: `ServingEngine` (a name and, once resolved, a version), parsed once
at the edge (`parse_engine`), and one `EnginePolicy` per engine (`policy_of`) holding what that
engine does: scheduler defaults by version, CUDA-graph sizes, multi-step scheduling, the KV
format it serves by default, default overheads, and its launch (the command it renders from its
published arguments, `launch`; its image and tag). Nothing outside the policies compares engine
names (tests/test_engine_names.py): adding an engine is adding its module here.

- `vllm`, `sglang`, `trtllm`: the engine, at the version of the profile that times it or its
  newest release; `name@version`: that release (`SpecError` naming `engine` for one Ridgeline
  does not model).
- `roofline`: Ridgeline's own scheduler, timed by the datasheet roofline.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.serving.policy import DefaultOverhead, EngineName, EnginePolicy, release
from app.engine.serving.roofline import RooflinePolicy
from app.engine.serving.sglang import SglangPolicy
from app.engine.serving.trtllm import TrtllmPolicy
from app.engine.serving.vllm import VllmPolicy
from app.engine.specs import SpecError

__all__ = [
    "ENGINE_PATTERN",
    "HELM_ENGINES",
    "LAUNCH_ENGINES",
    "PROFILED_ENGINES",
    "ROOFLINE",
    "DefaultOverhead",
    "EngineName",
    "EnginePolicy",
    "ServingEngine",
    "parse_engine",
    "policy_of",
    "release",
]

_POLICIES: dict[EngineName, EnginePolicy] = {
    policy.name: policy
    for policy in (VllmPolicy(), SglangPolicy(), TrtllmPolicy(), RooflinePolicy())
}

ENGINE_PATTERN = (
    rf"^({'|'.join(name.value for name in _POLICIES)})(@[A-Za-z0-9][A-Za-z0-9._+-]{{0,63}})?$"
)
"""The strings `parse_engine` reads: a name, optionally `@version`."""
LAUNCH_ENGINES: tuple[str, ...] = tuple(
    name.value for name, policy in _POLICIES.items() if policy.launchable
)
"""The engines whose launch Ridgeline renders (each policy's `launch`)."""
PROFILED_ENGINES: tuple[str, ...] = tuple(
    name.value for name, policy in _POLICIES.items() if policy.profiled
)
"""The engines measured profiles time (what a profile document may name)."""
HELM_ENGINES: tuple[str, ...] = tuple(
    name.value for name, policy in _POLICIES.items() if policy.helm_chart
)
"""The engines the production-stack Helm chart serves."""


def policy_of(name: EngineName | str) -> EnginePolicy:
    """The policy of the engine called `name`; `SpecError` naming `engine` for another."""
    try:
        return _POLICIES[EngineName(name)]
    except ValueError:
        names = ", ".join(n.value for n in EngineName)
        raise SpecError("engine", f"{name!r} is not a serving engine ({names})") from None


@dataclass(frozen=True, slots=True)
class ServingEngine:
    """A serving engine and its release; `version` None until resolved (a bare name: the
    version of the profile that times it, else the newest release modelled)."""

    name: EngineName
    version: str | None = None

    @property
    def policy(self) -> EnginePolicy:
        return _POLICIES[self.name]

    @property
    def launcher(self) -> EnginePolicy:
        """The policy of the engine that launches what this one simulated (the roofline's
        plans launch as vLLM)."""
        policy = _POLICIES[self.name]
        return policy if policy.launched_as is None else _POLICIES[policy.launched_as]

    @property
    def label(self) -> str:
        """`name@version`, or the name alone."""
        return self.name.value if self.version is None else f"{self.name.value}@{self.version}"

    def resolved(self, version: str | None = None) -> ServingEngine:
        """This engine at `version` (when it names none), else at its newest release."""
        if self.version is not None:
            return self
        return ServingEngine(self.name, version or self.policy.version(None))

    def __str__(self) -> str:
        return self.label


ROOFLINE = ServingEngine(EngineName.ROOFLINE)


def parse_engine(text: str, field: str = "engine") -> ServingEngine:
    """`vllm`, `vllm@0.24.0`, `roofline`... as a `ServingEngine`; `SpecError` naming `field`
    for another engine or a release Ridgeline does not model."""
    name, at, version = text.partition("@")
    policy = policy_of(name) if name in _POLICIES else None
    if policy is None:
        names = ", ".join(n.value for n in EngineName)
        raise SpecError(field, f"{name!r} is not a serving engine ({names}, optionally @version)")
    if not at:
        return ServingEngine(policy.name)
    refusal = policy.refusal(version)
    if refusal is not None:
        raise SpecError(field, refusal)
    return ServingEngine(policy.name, version)
