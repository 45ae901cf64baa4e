"""What a run is configured with: the step timer, the scheduler's knobs, the KV pool, and the
error of a run that would take too many steps."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from app.engine.memory import MemoryPlan
from app.engine.specs import SpecError, spec_field
from app.engine.step_load import StepLoad

__all__ = [
    "ClosedLoop",
    "PrefixCache",
    "SchedulerConfig",
    "SimulationTooLong",
    "StepTimer",
    "UnchunkedPolicy",
    "kv_capacity_tokens",
]


class StepTimer(Protocol):
    """How long one forward step takes; `StepCostModel` is one, a linear formula another."""

    def seconds(self, load: StepLoad) -> float:
        """Wall-clock seconds of a step doing `load`; positive."""
        ...


class SimulationTooLong(SpecError):
    """A run needs more forward steps than `max_steps` allows (`field` is "max_steps")."""

    def __init__(self, max_steps: int, message: str) -> None:
        super().__init__("max_steps", message)
        self.max_steps = max_steps


def kv_capacity_tokens(memory: MemoryPlan, block_tokens: int) -> int:
    """The KV pool of `memory` (one GPU of the replica) in whole blocks of `block_tokens`, as
    tokens: what `simulate` takes as `kv_capacity_tokens`. 0 when no block fits."""
    if block_tokens < 1:
        raise SpecError("block_tokens", f"must be at least 1, got {block_tokens}")
    tokens = max(0, math.floor(memory.kv_pool_bytes / memory.kv_bytes_per_token))
    # Each attention data-parallel rank has a pool of its own: whole blocks in each.
    return tokens // block_tokens * block_tokens * memory.kv_pools


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """A closed-loop load: `concurrency` users, each sending its next request `think_time_s`
    after its last one finished (benchmarks' `--concurrency`/`--max-concurrency`).

    Requests sent at the same moment do not reach the engine together: the benchmark client's
    tasks send them one by one and the engine's API server takes them in turn (HTTP, the
    chat template, tokenisation) before its engine loop sees them, which picks up whatever has
    arrived each time it is free. So a request reaches the engine `spacing_s` after the one
    before it at the earliest. Without that, users whose requests have the same lengths
    finish in the same step, resend together and are prefilled together, wave after wave,
    for ever; with it, the first to arrive at an idle engine is prefilled alone and the
    others join the next step, and the loop unlocks, as measured runs do: within a few rounds
    for a handful of users, over tens of rounds for 64 (docs/model.md). The size barely
    matters while it is well below a step (0.1 ms and 1 ms give TTFTs within a few per cent of
    each other); 0.5 ms is an assumption of a front end's per-request work, not a
    measurement."""

    concurrency: int
    think_time_s: float = 0.0
    spacing_s: float = 0.5e-3

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise SpecError("workload.concurrency", f"must be at least 1, got {self.concurrency}")
        if not (self.think_time_s >= 0 and math.isfinite(self.think_time_s)):
            raise SpecError(
                "workload.think_time_s", f"must not be negative, got {self.think_time_s}"
            )
        if not (self.spacing_s >= 0 and math.isfinite(self.spacing_s)):
            raise SpecError("workload.spacing_s", f"must not be negative, got {self.spacing_s}")


@dataclass(frozen=True, slots=True)
class PrefixCache:
    """Automatic prefix caching (vLLM's `--enable-prefix-caching`, SGLang's radix cache): a
    request reuses the KV of whole blocks of its prompt already computed. Either every prompt
    starts with the same `shared_prefix_tokens` (a system prompt: cached once the first request
    has computed it), or a share `hit_rate` of each prompt is found cached (multi-turn chat).
    At least the last prompt token is always computed (it yields the first token)."""

    shared_prefix_tokens: int = 0
    hit_rate: float = 0.0

    def __post_init__(self) -> None:
        if self.shared_prefix_tokens < 0:
            raise SpecError("prefix_cache.shared_prefix_tokens", "must not be negative")
        if not 0 <= self.hit_rate <= 1:
            raise SpecError("prefix_cache.hit_rate", f"must be in [0, 1], got {self.hit_rate}")
        if self.shared_prefix_tokens and self.hit_rate:
            raise SpecError("prefix_cache", "give shared_prefix_tokens or hit_rate, not both")

    def cached_tokens(self, prompts: NDArray[np.int64], block_tokens: int) -> NDArray[np.int64]:
        """Prompt tokens each request finds cached, in whole blocks, short of its last token;
        the first request of a shared prefix computes it."""
        if self.shared_prefix_tokens:
            found = np.minimum(self.shared_prefix_tokens, prompts - 1)
            found[:1] = 0
        else:
            found = np.floor(self.hit_rate * (prompts - 1)).astype(np.int64)
        return np.asarray(found // block_tokens * block_tokens, dtype=np.int64)


class UnchunkedPolicy(StrEnum):
    PREFILL_FIRST = "prefill_first"  # vLLM v0: prefill-only steps, running decodes stall
    MIXED = "mixed"  # vLLM v1 without chunking: decodes and whole prompts share a step


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """The engine's scheduler, its knobs named as vLLM names its flags: the one definition. A
    request gives some (`app.simulations.schemas.SchedulerSettings` is derived from these
    fields), the engine's policy completes them (`app.engine.serving`), and the answer echoes the
    completed one (`SchedulerUsed`, derived likewise)."""

    max_num_seqs: int = spec_field(
        "Most sequences running at once (--max-num-seqs).", default=256, ge=1, le=65536
    )
    max_num_batched_tokens: int = spec_field(
        "Token budget of one step (--max-num-batched-tokens): the prefill chunk size with "
        "chunked prefill (at least max_num_seqs), the most prompt tokens a step takes whole "
        "without it (a longer prompt runs as its step's only one).",
        default=2048,
        ge=1,
        le=1 << 24,
    )
    enable_chunked_prefill: bool = spec_field(
        "Split long prompts into chunks that share steps with the running decodes.",
        default=True,
    )
    unchunked_policy: UnchunkedPolicy = spec_field(
        "Without chunked prefill, how whole prompts are scheduled: `prefill_first` (vLLM V0: "
        "a step that admits prompts prefills only them, the running decodes wait) or `mixed` "
        "(vLLM V1, TensorRT-LLM: prompts and decodes share a step). The engine's; not a knob.",
        default=UnchunkedPolicy.PREFILL_FIRST,
    )
    long_prefill_token_threshold: int = spec_field(
        "Cap on one request's chunk per step (0: none, vLLM's default), leaving budget for "
        "others; applies with chunked prefill only.",
        default=0,
        ge=0,
        le=1 << 24,
    )
    num_scheduler_steps: int = spec_field(
        "Multi-step scheduling, vLLM V0's --num-scheduler-steps (vLLM 0.6.0 to 0.10.0; "
        "vllm-project/vllm#7000 added it, #22138 removed it): the scheduler decides once every "
        "n decode steps, so a request arriving within a group waits for its end before its "
        "prefill starts (requests still leave at their last token). 1 decides every step; "
        "more is a 422 for an engine version without it (vLLM V1, so every vLLM from 0.10.1; "
        "SGLang; TensorRT-LLM); the roofline takes any.",
        default=1,
        ge=1,
        le=256,
    )
    scheduler_recv_interval: int = spec_field(
        "SGLang's --scheduler-recv-interval: while a batch decodes, the scheduler looks for "
        "new requests once every n decode steps (sglang's SchedulerRecvSkipper; a step with "
        "prefill work counts as the whole interval, and an idle scheduler looks at once), so "
        "a request arriving meanwhile waits up to n steps before its prefill is scheduled. 1 "
        "looks every step (the default); more is a 422 for an engine without the flag "
        "(vLLM, TensorRT-LLM); the roofline takes any.",
        default=1,
        ge=1,
        le=1024,
    )

    def for_ranks(self, batches: int) -> SchedulerConfig:
        """The replica's budgets when `batches` batches are in flight at once, each scheduled
        with these (`Deployment.scheduler_batches`: one per attention data-parallel rank, vLLM
        and SGLang running a scheduler per rank, and one micro-batch per pipeline stage): one
        scheduler with that many times the sequences and tokens, kept in balance."""
        if batches == 1:
            return self
        return replace(
            self,
            max_num_seqs=self.max_num_seqs * batches,
            max_num_batched_tokens=self.max_num_batched_tokens * batches,
        )

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise SpecError(
                "scheduler.max_num_seqs", f"must be at least 1, got {self.max_num_seqs}"
            )
        if self.max_num_batched_tokens < 1:
            raise SpecError(
                "scheduler.max_num_batched_tokens",
                f"must be at least 1, got {self.max_num_batched_tokens}",
            )
        if self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_num_seqs:
            # vLLM refuses this too: a full batch of decodes would leave no budget for prefill.
            raise SpecError(
                "scheduler.max_num_batched_tokens",
                f"{self.max_num_batched_tokens} is below max_num_seqs {self.max_num_seqs}; with "
                "chunked prefill every running decode takes one token of the budget",
            )
        if self.long_prefill_token_threshold < 0:
            raise SpecError("scheduler.long_prefill_token_threshold", "must not be negative")
        if self.scheduler_recv_interval < 1:
            raise SpecError(
                "scheduler.scheduler_recv_interval",
                f"must be at least 1, got {self.scheduler_recv_interval}",
            )
        if self.num_scheduler_steps < 1:
            raise SpecError(
                "scheduler.num_scheduler_steps",
                f"must be at least 1, got {self.num_scheduler_steps}",
            )
