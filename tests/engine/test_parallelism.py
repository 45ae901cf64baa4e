"""Tensor-parallel feasibility."""

from __future__ import annotations

import pytest

from app.engine.memory import weight_bytes_per_gpu
from app.engine.parallelism import AlternativeKind, assess_tp
from app.engine.specs import Deployment, FfnType, ModelSpec, MoeSpec, SpecError
from app.engine.step_cost import StepCostModel
from tests.engine.test_counting import H100, LLAMA3_8B, LLAMA3_70B


def test_infeasible_tp_says_why() -> None:
    result = assess_tp(LLAMA3_8B, H100, candidates=(1, 3, 8, 64))
    by_tp = {c.tp: c for c in result.candidates}
    assert not by_tp[3].feasible
    assert "32 query heads" in by_tp[3].reasons[0]
    assert not by_tp[64].feasible
    assert by_tp[64].ttft_ms is None
    assert by_tp[8].feasible and by_tp[8].fits_memory
    assert result.recommended_tp == 1


def test_feasible_means_deployable_and_splits_evenly_the_divisibility() -> None:
    """Llama-3-70B on one 80 GB H100: tp 1 splits (there is nothing to split) but 141 GB of
    weights do not fit, so it is not feasible; tp 4 is both."""
    by_tp = {c.tp: c for c in assess_tp(LLAMA3_70B, H100, candidates=(1, 4)).candidates}
    assert by_tp[1].splits_evenly and not by_tp[1].fits_memory
    assert not by_tp[1].feasible
    assert by_tp[4].splits_evenly and by_tp[4].fits_memory and by_tp[4].feasible


def test_candidate_figures_match_the_memory_model() -> None:
    result = assess_tp(LLAMA3_70B, H100, context_tokens=4096)
    two = next(c for c in result.candidates if c.tp == 2)
    assert two.weights_bytes_per_gpu == weight_bytes_per_gpu(LLAMA3_70B, Deployment(tp=2))
    assert two.kv_bytes_per_token_per_gpu == 2 * 80 * 4 * 128 * 2
    assert two.communication_share_decode is not None
    assert 0 < two.communication_share_decode < 1
    one = next(c for c in result.candidates if c.tp == 1)
    assert one.communication_share_decode == 0.0
    assert "weights do not fit" in one.reasons[0]
    sixteen = next(c for c in result.candidates if c.tp == 16)
    assert any("replicated 2 times" in r for r in sixteen.reasons)


@pytest.mark.parametrize("context_tokens", [2048, 4096, 7000])
def test_the_memory_reason_counts_the_sequences_the_candidate_reports(context_tokens: int) -> None:
    """The reason's "(N sequences of C tokens)" is `max_batch_by_memory`, floored as it is (the
    text once rounded instead, and could say one sequence more than the figure)."""
    result = assess_tp(LLAMA3_70B, H100, context_tokens=context_tokens)
    fitting = [c for c in result.candidates if c.feasible]
    assert [c.tp for c in fitting] == [2, 4, 8, 16]
    for candidate in fitting:
        assert (
            f"({candidate.max_batch_by_memory} sequences of {context_tokens} tokens)"
            in (candidate.reasons[0])
        )


def test_latency_goal_picks_a_larger_tp() -> None:
    free = assess_tp(LLAMA3_70B, H100)
    two = next(c for c in free.candidates if c.tp == 2)
    assert two.tpot_ms is not None
    goal = assess_tp(LLAMA3_70B, H100, tpot_slo_ms=two.tpot_ms * 0.8)
    assert goal.recommended_tp is not None and goal.recommended_tp > 2
    chosen = next(c for c in goal.candidates if c.tp == goal.recommended_tp)
    assert chosen.meets_latency_goal
    assert chosen.tpot_ms is not None and chosen.tpot_ms <= two.tpot_ms * 0.8


def test_alternatives_when_tp_must_exceed_the_kv_heads() -> None:
    """Two KV heads and 60 GB of weights: no tp <= 2 fits an 80 GiB GPU."""
    model = ModelSpec(
        num_layers=48,
        hidden_size=6144,
        num_attention_heads=48,
        num_kv_heads=2,
        head_dim=128,
        intermediate_size=2048,
        ffn_type=FfnType.GATED,
        vocab_size=131072,
        max_context_tokens=32768,
        moe=MoeSpec(num_experts=64, experts_per_token=4, expert_intermediate_size=2048),
    )
    result = assess_tp(model, H100)
    assert result.recommended_tp is not None and result.recommended_tp > 2
    kinds = {a.kind for a in result.alternatives}
    assert kinds == set(AlternativeKind)
    assert all(a.why for a in result.alternatives)
    assert result.warnings


def test_no_alternatives_when_tp_within_kv_heads_works() -> None:
    assert assess_tp(LLAMA3_70B, H100).alternatives == ()


def test_rejects_bad_candidates() -> None:
    with pytest.raises(SpecError) as error:
        assess_tp(LLAMA3_8B, H100, candidates=(0,))
    assert error.value.field == "candidates"
    with pytest.raises(SpecError) as error:
        assess_tp(LLAMA3_8B, H100, context_tokens=10**6)
    assert error.value.field == "context_tokens"


def test_a_kept_cost_model_changes_nothing_but_the_work() -> None:
    """A service passes the target's cost model so that each layout's memory plan and cost
    model are built once: the assessment is the same, asked once or twice; a cost model of
    another model keeps nothing."""
    fresh = assess_tp(LLAMA3_70B, H100, context_tokens=4096, layouts=True)
    kept = StepCostModel(LLAMA3_70B, H100)
    assert assess_tp(LLAMA3_70B, H100, context_tokens=4096, layouts=True, cost=kept) == fresh
    assert assess_tp(LLAMA3_70B, H100, context_tokens=4096, layouts=True, cost=kept) == fresh
    other = StepCostModel(LLAMA3_8B, H100)
    assert assess_tp(LLAMA3_70B, H100, context_tokens=4096, layouts=True, cost=other) == fresh
