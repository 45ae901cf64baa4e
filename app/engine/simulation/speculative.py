"""Speculative decoding: a drafter proposes `k` tokens per sequence, the target model verifies
them in one step (k + 1 query tokens per sequence over its context) and keeps the accepted ones
plus one of its own.

`SpeculativeTimer` wraps the target's step timer for the simulator. A step that decodes is timed
as the verify step plus the drafter's k steps; it emits `mean_accepted_tokens + 1` tokens per
sequence on average, so a decode-only step is timed as `1 / (mean_accepted_tokens + 1)` of that:
the simulator's one-token steps then give the mean TPOT and throughput of the real ones (tokens
come in bursts, which the ITL percentiles do not show). A step that also carries prefill chunks
is timed whole and credits its decodes one token: slower than the engine, never faster.

Drafters: the model's own multi-token-prediction layers (`mtp`: each draft token one extra
decoder layer and the LM head, as DeepSeek-V3's MTP module runs), or a separate draft model
timed by its own step timer (`draft`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from app.engine.counting import OpClass
from app.engine.simulation.config import StepTimer
from app.engine.specs import SpecError
from app.engine.step_cost import StepCostModel
from app.engine.step_load import StepLoad

__all__ = ["DraftMethod", "SpeculativeDecoding", "SpeculativeTimer", "verify_load"]


class DraftMethod(StrEnum):
    MTP = "mtp"
    DRAFT = "draft"


@dataclass(frozen=True, slots=True)
class SpeculativeDecoding:
    """`num_draft_tokens` proposed per step, of which `mean_accepted_tokens` are accepted on
    average (measured acceptance: DeepSeek-V3 reports 85-90 % for its one MTP token)."""

    method: DraftMethod
    num_draft_tokens: int
    mean_accepted_tokens: float

    def __post_init__(self) -> None:
        if not 1 <= self.num_draft_tokens <= 16:
            raise SpecError(
                "speculative.num_draft_tokens",
                f"must be between 1 and 16, got {self.num_draft_tokens}",
            )
        if not 0 <= self.mean_accepted_tokens <= self.num_draft_tokens:
            raise SpecError(
                "speculative.mean_accepted_tokens",
                f"must be between 0 and num_draft_tokens {self.num_draft_tokens}, got "
                f"{self.mean_accepted_tokens}",
            )

    @property
    def tokens_per_step(self) -> float:
        """Tokens a verify step emits per sequence: the accepted drafts and the target's own."""
        return self.mean_accepted_tokens + 1.0


def verify_load(load: StepLoad, draft_tokens: int) -> StepLoad:
    """`load` with each decode verifying k drafted tokens besides its own: the decode as it is
    (its context read once, with the decode kernel, as FlashMLA and FlashInfer verify), and k
    more rows per sequence through the linear layers, writing their KV, each attending over the
    context and the drafts before it (k c + k (k + 1) / 2 query-key pairs per sequence)."""
    seqs, context = load.decode_seqs, load.decode_context_tokens
    if seqs == 0:
        return load
    k = draft_tokens
    return load + StepLoad(
        prefill_tokens=seqs * k,
        prefill_attention_pairs=k * context + seqs * k * (k + 1) / 2,
    )


class SpeculativeTimer:
    """The target's steps with speculative decoding (see the module docstring)."""

    def __init__(
        self,
        target: StepCostModel,
        spec: SpeculativeDecoding,
        draft: StepTimer | None = None,
    ) -> None:
        if spec.method is DraftMethod.MTP and not target.model.mtp_layers:
            raise SpecError(
                "speculative.method",
                f"model {target.model.id} has no multi-token-prediction layers; use a draft model",
            )
        if spec.method is DraftMethod.DRAFT and draft is None:
            raise SpecError("speculative.draft_model", "a draft model is needed")
        self.target = target
        self.spec = spec
        self.draft = draft
        self.request_overhead_s = target.request_overhead_s
        self.kv_window = target.kv_window

    def draft_seconds(self, seqs: int, context: int) -> float:
        """The drafter's k steps for `seqs` sequences of `context` total tokens."""
        k = self.spec.num_draft_tokens
        step = StepLoad(decode_seqs=seqs, decode_context_tokens=context)
        if self.draft is not None:
            return k * self.draft.seconds(step)
        # One MTP layer and the LM head per draft token: a layer's share of the step.
        breakdown = self.target.breakdown(step)
        lm_head = sum(op.seconds for op in breakdown.ops if op.op_class is OpClass.LM_HEAD)
        layers = breakdown.total_s - breakdown.overhead_s - lm_head
        return k * (layers / self.target.model.num_layers + lm_head)

    def seconds(self, load: StepLoad) -> float:
        if load.decode_seqs == 0:
            return self.target.seconds(load)
        k = self.spec.num_draft_tokens
        step = self.target.seconds(verify_load(load, k)) + self.draft_seconds(
            load.decode_seqs, load.decode_context_tokens
        )
        if load.prefill_tokens:
            return step  # mixed: timed whole, its decodes credited one token
        return step / self.spec.tokens_per_step
