"""Disaggregated prefill and decode, simulated: a prefill pool computes each prompt and its first
token, the request's KV moves over a link to the decode pool, and the decode pool generates the
rest (vLLM's `--kv-transfer-config` with the NIXL connector, SGLang's and Dynamo's PD mode).

A pool of k replicas behind a balancer serves each replica a k-th of the traffic: one replica is
simulated on the trace slowed k times (the same requests at a k-th of the rate).

1. Prefill pool: one replica serves the trace with every request stopping at its first token;
   TTFT is that replica's (queueing behind other prompts included).
2. Link: request i's KV, `prompt_tokens[i] * kv_bytes_per_token` bytes, leaves when its first
   token is out and arrives `latency_s + bytes / bandwidth_bytes_per_s` later (`KvLink`).
   Transfers do not contend with each other (each prefill GPU has its own NIC rail).
3. Decode pool: one replica admits each request when its KV has arrived, FCFS, as any waiting
   request: it takes the blocks of its prompt (no prefill) and its first step computes the first
   token's KV and emits the second token; the scheduler, KV blocks and preemption are those of
   `simulate` (a preempted request recomputes locally).

TPOT and ITL come from the decode pool and count the transfer in the gap before the second
token; e2e runs from arrival to the decode pool's last token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from app.engine.simulation.config import SchedulerConfig, SimulationTooLong, StepTimer
from app.engine.simulation.loop import _run, simulate
from app.engine.simulation.results import Percentiles, RequestTimes, SimulationResult
from app.engine.simulation.stats import percentiles, summarise
from app.engine.specs import SpecError
from app.engine.workload import Trace

__all__ = [
    "NDR_PORT_BYTES_PER_S",
    "NIXL_TRANSFER_LATENCY_S",
    "DisaggregatedResult",
    "KvLink",
    "Pool",
    "simulate_disaggregated",
]

NDR_PORT_BYTES_PER_S = 50e9
"""One 400 Gb/s NDR InfiniBand port (NVIDIA ConnectX-7 datasheet: 400 Gb/s), the NIC per GPU of
an H100/H200/B200 HGX node, over which NIXL writes the KV with GPUDirect RDMA."""
NIXL_TRANSFER_LATENCY_S = 1e-3
"""An assumption, not a published figure: an RDMA write itself starts in microseconds, but a
NIXL transfer also waits for the decode side's block allocation and a completion notification
(vLLM's NixlConnector exchanges them over ZMQ and polls `check_xfer_state`); 1 ms bounds that
control path. Set it from a measurement of the deployment."""


@dataclass(frozen=True, slots=True)
class KvLink:
    """The link a request's KV crosses from the prefill pool to the decode pool: one transfer per
    request, `latency_s + bytes / bandwidth_bytes_per_s` seconds."""

    bandwidth_bytes_per_s: float = NDR_PORT_BYTES_PER_S
    latency_s: float = NIXL_TRANSFER_LATENCY_S

    def __post_init__(self) -> None:
        if not (self.bandwidth_bytes_per_s > 0 and math.isfinite(self.bandwidth_bytes_per_s)):
            raise SpecError(
                "link.bandwidth_bytes_per_s", f"must be positive, got {self.bandwidth_bytes_per_s}"
            )
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise SpecError("link.latency_s", f"must not be negative, got {self.latency_s}")

    def transfer_s(
        self, prompt_tokens: NDArray[np.int64], kv_bytes_per_token: float
    ) -> NDArray[np.float64]:
        """Seconds each prompt's KV takes to cross (the KV of the prompt's tokens; the first
        output token's KV is written by the decode pool)."""
        return np.asarray(
            self.latency_s + prompt_tokens * kv_bytes_per_token / self.bandwidth_bytes_per_s,
            dtype=np.float64,
        )


@dataclass(frozen=True, slots=True)
class Pool:
    """`replicas` identical replicas, each timed by `timer` with `kv_capacity_tokens` of KV cache
    and `scheduler`'s budgets."""

    timer: StepTimer
    kv_capacity_tokens: int
    scheduler: SchedulerConfig
    replicas: int = 1

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise SpecError("replicas", f"must be at least 1, got {self.replicas}")


@dataclass(frozen=True, eq=False)
class DisaggregatedResult:
    """What a disaggregated run measured.

    `prefill` is one prefill replica's run (each request ending at its first token). `served`
    is the requests end to end, indexed like the trace: TTFT from the prefill pool, TPOT, ITL and
    e2e through the decode pool; its rates, queue and step counts are one decode replica's, its
    `saturated` the decode replica's (see `prefill.saturated` for the other pool).
    `transfer_ms`: the KV transfers' times."""

    prefill: SimulationResult
    served: SimulationResult
    transfer_ms: Percentiles


def simulate_disaggregated(
    trace: Trace,
    prefill: Pool,
    decode: Pool,
    *,
    kv_bytes_per_token: float,
    link: KvLink | None = None,
    block_tokens: int = 16,
    ttft_slo_ms: float | None = None,
    tpot_slo_ms: float | None = None,
    max_steps: int | None = None,
    prefill_run: SimulationResult | None = None,
) -> DisaggregatedResult:
    """Serve `trace` (the whole traffic) on a prefill pool and a decode pool joined by `link`
    (default `KvLink()`); see the module docstring. `kv_bytes_per_token` is the KV one token
    takes on one GPU of the prefill replica (`MemoryPlan.kv_bytes_per_token`: a tensor-parallel
    replica splits the heads, and each GPU sends its share over its own NIC at once).
    `prefill_run`: this function's `prefill` result for the same trace and prefill pool, reused
    (a search over decode pools runs the prefill pool once). `SpecError` as `simulate`'s."""
    if not (kv_bytes_per_token > 0 and math.isfinite(kv_bytes_per_token)):
        raise SpecError("kv_bytes_per_token", f"must be positive, got {kv_bytes_per_token}")
    link = link if link is not None else KvLink()
    prompt_only = Trace(
        arrival_s=trace.arrival_s * prefill.replicas,
        prompt_tokens=trace.prompt_tokens,
        output_tokens=np.ones_like(trace.output_tokens),
    )
    prefill_result = prefill_run
    if prefill_result is None:
        prefill_result = simulate(
            prompt_only,
            prefill.timer,
            kv_capacity_tokens=prefill.kv_capacity_tokens,
            block_tokens=block_tokens,
            scheduler=prefill.scheduler,
            ttft_slo_ms=ttft_slo_ms,
            max_steps=max_steps,
        )
    elif len(prefill_result.requests.arrival_s) != len(trace):
        raise SpecError("prefill_run", "was not made for this trace")
    ttft_s = prefill_result.requests.ttft_s
    served = ~np.isnan(ttft_s)  # a prompt the prefill pool's cache cannot hold is rejected
    index = np.flatnonzero(served)
    transfer_s = link.transfer_s(trace.prompt_tokens, kv_bytes_per_token)
    # The decode replica's frame: its share of the traffic, each request's first token out at
    # its arrival plus its TTFT, its KV in the pool a transfer later.
    sent_s = trace.arrival_s[index] * decode.replicas
    first_token_s = sent_s + ttft_s[index]
    ready_s = first_token_s + transfer_s[index]
    order = np.argsort(ready_s, kind="stable")
    decode_trace = Trace(
        arrival_s=ready_s[order],
        prompt_tokens=trace.prompt_tokens[index][order],
        output_tokens=trace.output_tokens[index][order],
    )
    decode_max_steps = max_steps
    if max_steps is not None and prefill_run is None:
        # One budget for both pools' runs: the decode run gets what the prefill run left.
        decode_max_steps = max_steps - prefill_result.steps
        if decode_max_steps < 1:
            raise SimulationTooLong(
                max_steps, f"the prefill pool took all {max_steps:,} steps a run may take"
            )
    run = _run(
        decode_trace,
        decode.timer,
        kv_capacity_tokens=decode.kv_capacity_tokens,
        block_tokens=block_tokens,
        scheduler=decode.scheduler,
        ttft_slo_ms=ttft_slo_ms,
        tpot_slo_ms=tpot_slo_ms,
        exact_step_times=False,
        max_steps=decode_max_steps,
        closed_loop=None,
        prefix_cache=None,
        prefilled_s=first_token_s[order],
    )
    result = summarise(decode_trace, run, ttft_slo_ms, tpot_slo_ms, sent_s=sent_s[order])
    # Back to the trace's order; requests the prefill pool rejected stay NaN.
    count = len(trace)
    first = np.full(count, np.nan)
    finish = np.full(count, np.nan)
    first[index[order]] = result.requests.first_token_s
    finish[index[order]] = result.requests.finish_s
    times = RequestTimes(
        arrival_s=trace.arrival_s * decode.replicas,
        first_token_s=first,
        finish_s=finish,
        output_tokens=trace.output_tokens,
    )
    served_result = replace(
        result,
        requests=times,
        rejected_requests=result.rejected_requests + int(count - len(index)),
    )
    return DisaggregatedResult(
        prefill=prefill_result,
        served=served_result,
        transfer_ms=percentiles(transfer_s[index]),
    )
