"""A discrete-event simulation of one replica serving a trace with continuous batching.

The replica runs forward steps back to back. Each step the scheduler picks the work, the
`StepTimer` says how long the step takes, and at its end every scheduled decode emits one token
and every prefill that completes emits one. Time jumps over idle gaps to the next arrival.

Scheduling follows vLLM. With chunked prefill (`enable_chunked_prefill`, the default, vLLM v1):
every step takes, within a budget of `max_num_batched_tokens` tokens,

1. every running decode, one token each (decodes are never starved);
2. the partially prefilled requests, in admission order, each up to the remaining budget (and up
   to `long_prefill_token_threshold` tokens when that is set);
3. waiting requests, first come first served, each taking up to the remaining budget as its
   first chunk, while running sequences stay within `max_num_seqs` and the blocks of the head of
   the queue's first chunk fit the KV cache (a head that does not fit blocks the queue: FCFS, no
   skipping).

vLLM V1 walks its running requests in admission order, decodes and partial prefills alike;
taking the decodes first differs only when an older partial prefill's chunk (capped by
`long_prefill_token_threshold`) would leave a newer decode no budget.

A chunk of q prompt tokens after c computed ones costs `q*c + q*(q+1)/2` causal attention pairs.

With chunking off a prompt is prefilled whole in one step, and `unchunked_policy` says how:
`PREFILL_FIRST` (the default) is vLLM v0's scheduler: a step that can admit waiting prompts
prefills only them, whole, and every running decode stalls until it ends; decode steps run when
nothing can be admitted. This is the default because it is what "chunked prefill off" meant in
vLLM v0, where the option was introduced and measured, and it is the behaviour article A's
head-of-line argument is about. `MIXED` is vLLM v1 with chunking off: decodes and
whole prompts share a step. Both let one prompt longer than the budget run as its step's only
new prompt (vLLM requires `max_num_batched_tokens >= max_model_len` when chunking is off, so the
budget never truly splits a prompt).

Note what chunking alone does and does not do. It bounds every step to about the budget, so
running decodes keep their inter-token latency while a long prompt prefills. It does not let
short requests that arrive during that prefill overtake it: the partial prefill is scheduled
before the waiting queue and takes the whole remaining budget, as vLLM v1 does by default. Set
`long_prefill_token_threshold` (vLLM's knob of the same name) to cap one request's chunk per step
and leave budget for the short requests behind it.

KV cache: `kv_capacity_tokens` in blocks of `block_tokens`, allocated as vLLM V1 allocates them
(`Scheduler.schedule` in vllm/v1/core/sched/scheduler.py): a request holds the blocks of the
tokens it has computed. A waiting request is admitted when the blocks of its first chunk fit (not
its whole prompt: V1 reserves nothing ahead); each later chunk takes its own blocks, and a decode
takes one block when its token starts one. When the running requests' blocks for a step do not
fit, the most recently admitted running request is preempted (recompute: its blocks are freed, it
goes back to the head of the queue and later recomputes its prompt plus the tokens it had
generated, which emits its next token), again until the rest fit; no request is admitted in a step
that preempted. A request whose prompt plus output (less the last token, whose KV is never
written) cannot fit in the whole cache would never finish (it would preempt itself forever), and
is rejected at arrival: counted, not simulated. This includes every prompt that alone exceeds the
cache.

Time accounting. The first token is emitted at the end of the step that completes a request's
prefill: TTFT = that time minus arrival. Each later token is emitted at the end of a decode step;
the inter-token latencies (ITL) are the gaps between a request's consecutive tokens, so a decode
stalled by prefill-only steps sees one long gap. TPOT of a request with T > 1 output tokens is
(e2e - TTFT) / (T - 1), the mean of its T - 1 gaps.

Work is bounded: `max_steps` caps the forward steps of a run. A run that provably needs more
(`minimum_steps`: the decode tokens over `max_num_seqs`, and all tokens over the step budget) is
refused before it starts, and one that reaches the cap stops there; both raise
`SimulationTooLong`. Arrival times are absolute seconds in float64: keep them below about 1e9 s
(a resolution of 0.1 us), or step times are lost in rounding.

Speed: decodes are kept in aggregate (their count, the sum of their contexts, how many cross a
block boundary at each step modulo `block_tokens`, a heap of finishing steps). Steps with prefill
work call the timer; decode-only steps interpolate memoised timer calls (see `simulate`), and a
stretch of them that nothing can change (no finish, arrival, queue sample or admission before its
end, every decode's blocks free) runs as one group summed in closed form (`_Run.execute`).
scripts/bench_simulator.py times 100,000 requests at several loads.
"""

from app.engine.simulation.config import (
    ClosedLoop,
    PrefixCache,
    SchedulerConfig,
    SimulationTooLong,
    StepTimer,
    UnchunkedPolicy,
    kv_capacity_tokens,
)
from app.engine.simulation.disaggregated import (
    DisaggregatedResult,
    KvLink,
    Pool,
    simulate_disaggregated,
)
from app.engine.simulation.loop import simulate
from app.engine.simulation.results import (
    Percentiles,
    QueueSample,
    RequestTimes,
    SimulationResult,
)
from app.engine.simulation.stats import QUEUE_SAMPLES, SATURATION_GROWTH_FRACTION, SATURATION_Z
from app.engine.simulation.work import closed_loop_steps, expected_steps, minimum_steps

__all__ = [
    "QUEUE_SAMPLES",
    "SATURATION_GROWTH_FRACTION",
    "SATURATION_Z",
    "ClosedLoop",
    "DisaggregatedResult",
    "KvLink",
    "Percentiles",
    "Pool",
    "PrefixCache",
    "QueueSample",
    "RequestTimes",
    "SchedulerConfig",
    "SimulationResult",
    "SimulationTooLong",
    "StepTimer",
    "UnchunkedPolicy",
    "closed_loop_steps",
    "expected_steps",
    "kv_capacity_tokens",
    "minimum_steps",
    "simulate",
    "simulate_disaggregated",
]
