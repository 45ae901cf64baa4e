"""The work in one forward step of a serving engine, in aggregates.

A continuous-batching engine runs, in one step, the next token of every running decode plus up to
a token budget of prefill chunks. The step's time depends on the batch only through these sums,
which is what lets the serving simulator time hundreds of thousands of steps quickly.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["StepLoad"]


class StepLoad(NamedTuple):
    """Aggregates of one step; every field is a count of tokens or token pairs, whole model.

    A named tuple, in the order `StepCostModel.step_seconds` takes the fields: immutable, built
    in a fraction of a frozen dataclass's time (a search or an estimate builds several per
    answer), and its own positional arguments (`fields`)."""

    prefill_tokens: int = 0
    """New prompt tokens computed this step (the sum of the prefill chunks' sizes)."""
    prefill_chunks: int = 0
    """How many sequences contribute a prefill chunk."""
    prefill_attention_pairs: float = 0.0
    """Query-key pairs the prefill chunks attend over: for a chunk of q tokens after c cached ones,
    q*c + q*(q+1)/2 when causal, q*(c+q) when not."""
    prefill_kv_tokens: int = 0
    """KV-cache tokens the prefill chunks read (the cached prefix c of each chunk) or write (q)."""
    decode_seqs: int = 0
    """Sequences producing one token each this step."""
    decode_context_tokens: int = 0
    """Sum of those sequences' context lengths: the KV-cache tokens decode attention reads."""

    @property
    def tokens(self) -> int:
        """Rows through the linear layers."""
        return self.prefill_tokens + self.decode_seqs

    def fields(self) -> tuple[int, int, float, int, int, int]:
        """The fields in order: the positional arguments of `StepCostModel.step_seconds`."""
        return self

    def __add__(self, other: StepLoad) -> StepLoad:  # type: ignore[override]
        """The two loads in one step (a prefill chunk beside the running decodes)."""
        return StepLoad(
            prefill_tokens=self.prefill_tokens + other.prefill_tokens,
            prefill_chunks=self.prefill_chunks + other.prefill_chunks,
            prefill_attention_pairs=self.prefill_attention_pairs + other.prefill_attention_pairs,
            prefill_kv_tokens=self.prefill_kv_tokens + other.prefill_kv_tokens,
            decode_seqs=self.decode_seqs + other.decode_seqs,
            decode_context_tokens=self.decode_context_tokens + other.decode_context_tokens,
        )
