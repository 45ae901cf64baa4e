"""What a serving engine's policy holds: the facts of one engine, by version, that a simulation,
a timer and a launch render need. `app.engine.serving` has one subclass per engine
(`vllm`, `sglang`, `trtllm`, `roofline`) and the registry; nothing else compares engine names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from packaging.version import InvalidVersion, Version

from app.engine.dtypes import DType
from app.engine.serving.launch import (
    EngineArguments,
    EngineLaunch,
    LaunchBuilder,
    PlannedReplica,
    ServedModel,
    published_arguments,
)
from app.engine.simulation.config import SchedulerConfig
from app.engine.specs import GpuSpec, ModelSpec, SpecError

__all__ = ["PLAN_MIN_CHUNK_TOKENS", "DefaultOverhead", "EngineName", "EnginePolicy", "release"]

PLAN_MIN_CHUNK_TOKENS = 512
"""The smallest token budget a plan tries by default (vLLM V0's chunked-prefill default)."""


class EngineName(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"
    ROOFLINE = "roofline"  # Ridgeline's own scheduler, steps timed by the roofline


def release(version: str) -> Version | None:
    """`version` as a release (PEP 440: `0.8.5.post1`, `1.3.0rc20`), or None when it is not
    one."""
    try:
        return Version(version)
    except InvalidVersion:
        return None


@dataclass(frozen=True, slots=True)
class DefaultOverhead:
    """An engine's own cost outside the kernels where no measurement of it exists (what an
    imported or measured profile starts from until it is calibrated to serving runs): per step,
    per running sequence, per token, and per layer before a request's first token."""

    step_ms: float
    per_sequence_ms: float
    prefill_per_layer_ms: float
    source: str
    per_token_ms: float = 0.0


class EnginePolicy:
    """One serving engine's behaviour. Versions are PEP 440 releases from `first_release` up
    to the minor series of `newest_release`; a bare name means the newest (or the version of
    the profile that times it)."""

    name: EngineName
    title: str
    first_release: str | None = None
    newest_release: str | None = None
    overhead: DefaultOverhead | None = None
    image: str | None = None
    """The container image its launch renders run (`repository`, tagged by `image_tag`)."""
    profiled: bool = True
    """Whether measured profiles time it (every engine but the roofline, which is the datasheet
    roofline by definition)."""
    launched_as: EngineName | None = None
    """The engine a plan simulated with this one launches (the roofline's plans: vLLM); None:
    itself."""
    helm_chart: bool = False
    """Whether the production-stack Helm chart (`app.deployments`' helm target) serves it."""
    bundled_default: bool = False
    """Whether its newest bundled profile is each GPU's default profile, the engine a request
    that names none is timed under (vLLM: the engine most deployments run)."""
    silicon_backend: str | None = None
    """Its directory in aiconfigurator-core's silicon database
    (`systems/data/<system>/<op family>/<backend>/<version>/`); None: it has none."""

    @property
    def launchable(self) -> bool:
        """Whether Ridgeline renders its launch (it has published arguments)."""
        return self.launched_as is None and self.image is not None

    def arguments(self) -> EngineArguments:
        """Its published command-line arguments (`launch.published_arguments`)."""
        return published_arguments(self.name.value)

    def launch(
        self,
        args: EngineArguments,
        model: ServedModel,
        replica: PlannedReplica,
        options_dir: str | None = None,
    ) -> EngineLaunch:
        """The launch of one replica with `args` (this engine's published arguments), checked
        against them; `options_dir`: where the command finds its options file (None: the
        working directory)."""
        builder = LaunchBuilder(args)
        self.fill_launch(builder, model, replica)
        builder.spans_nodes(replica)
        return builder.done(options_dir)

    def fill_launch(self, b: LaunchBuilder, model: ServedModel, replica: PlannedReplica) -> None:
        """Put the replica's settings into `b` as this engine's flags and options, or report
        each it cannot express."""
        raise NotImplementedError(f"{self.title} has no launch of its own")

    def refusal(self, version: str) -> str | None:
        """Why `version` is not a release of this engine that Ridgeline models, or None."""
        if self.first_release is None or self.newest_release is None:
            return f"{self.title} has no versions: give `{self.name.value}` alone"
        found = release(version)
        first, newest = Version(self.first_release), Version(self.newest_release)
        known = f"{self.title} {first} to {newest.major}.{newest.minor}.x"
        if found is None:
            return f"{version!r} is not a {self.title} release (known: {known})"
        if found < first:
            return f"{self.title} {version} predates the releases Ridgeline models ({known})"
        if found.release[:2] > newest.release[:2]:
            return (
                f"{self.title} {version} is newer than the newest release Ridgeline models "
                f"({known})"
            )
        return None

    def version(self, version: str | None) -> str | None:
        """The release a request means: `version`, else the newest modelled."""
        return version if version is not None else self.newest_release

    def scheduler_defaults(
        self, version: str | None, gpu: GpuSpec, context_tokens: int
    ) -> SchedulerConfig:
        """What the engine's scheduler runs on `gpu` when nothing is set (for a model of
        `context_tokens` context)."""
        return SchedulerConfig()

    def reads_checkpoint_kv(self, version: str | None) -> bool:
        """Whether this version's default KV cache (`--kv-cache-dtype auto`) takes the format
        the checkpoint's quantisation config declares (`ModelSpec.checkpoint_kv_dtype`)."""
        return True

    def kv_dtype(self, version: str | None, model: ModelSpec | None, weights: DType) -> DType:
        """The KV-cache format the engine serves `model`'s `weights` with when none is asked
        for (`--kv-cache-dtype auto`): the one the checkpoint's quantisation config declares,
        where the checkpoint's own weights are served and this version reads it; else the
        model's compute dtype, 16-bit whatever the weights (fp16 beside fp16 weights, else
        bf16: fp8 and fp4 weights compute in bf16)."""
        declared = model.checkpoint_kv_dtype if model is not None else None
        if (
            declared is not None
            and model is not None
            and weights is model.checkpoint_dtype
            and self.reads_checkpoint_kv(version)
        ):
            return declared
        return DType.FP16 if weights is DType.FP16 else DType.BF16

    def plan_schedulers(
        self, version: str | None, gpu: GpuSpec, context_tokens: int
    ) -> tuple[SchedulerConfig, ...]:
        """The schedulers a capacity plan tries on `gpu` when the request names none: the
        engine's defaults and, where it chunks prompts, the same with a quarter of the token
        budget (at least `PLAN_MIN_CHUNK_TOKENS`) and at most that many sequences. A smaller
        budget spreads a long prompt over more steps but keeps every step, and so the running
        decodes' TPOT, shorter (vLLM's optimisation guide: a smaller
        `--max-num-batched-tokens`, e.g. 2048, for better inter-token latency; a larger one for
        better TTFT); the plan keeps whichever is cheaper within the SLOs. Smaller budget
        first."""
        default = self.scheduler_defaults(version, gpu, context_tokens)
        budget = max(PLAN_MIN_CHUNK_TOKENS, default.max_num_batched_tokens // 4)
        if not default.enable_chunked_prefill or budget >= default.max_num_batched_tokens:
            return (default,)
        smaller = replace(
            default,
            max_num_batched_tokens=budget,
            max_num_seqs=min(default.max_num_seqs, budget),
        )
        return (smaller, default)

    def multi_step_refusal(self, version: str | None) -> str | None:
        """Why this version cannot decide once every several decode steps (vLLM V0's
        `--num-scheduler-steps`), or None when it can."""
        return f"{self.title} has no multi-step scheduling: leave num_scheduler_steps at 1"

    def recv_interval_refusal(self, version: str | None) -> str | None:
        """Why this engine cannot look for new requests less often than every step (SGLang's
        `--scheduler-recv-interval`), or None when it can."""
        return (
            f"{self.title} has no scheduler receive interval (SGLang's "
            "--scheduler-recv-interval): leave scheduler_recv_interval at 1"
        )

    def graph_sizes(self, version: str | None, tp: int) -> tuple[int, ...]:
        """The decode batch sizes the engine captures CUDA graphs at by default, and pads a
        decode-only step up to; empty: it runs every batch at its own size."""
        return ()

    def scheduler(
        self, version: str | None, gpu: GpuSpec, context_tokens: int, **given: Any
    ) -> SchedulerConfig:
        """The scheduler a request runs: the settings it `given` over the engine's defaults;
        `SpecError` naming `scheduler.<field>` when they cannot work together or this version
        cannot run them."""
        # Settings only some engines (and releases) have: asked for, or a 422 saying why not.
        for field, refusal_of in (
            ("num_scheduler_steps", self.multi_step_refusal),
            ("scheduler_recv_interval", self.recv_interval_refusal),
        ):
            if given.get(field, 1) > 1:
                refusal = refusal_of(version)
                if refusal is not None:
                    raise SpecError(f"scheduler.{field}", refusal)
        defaults = self.scheduler_defaults(version, gpu, context_tokens)
        settings = {name: value for name, value in given.items() if value is not None}
        return replace(defaults, **settings)

    def image_tag(self, version: str | None) -> str:
        """The image tag of `version` (`latest` when none is known)."""
        return "latest" if version is None else f"v{version}"
