"""Named request-length shapes: the datasets `vllm bench serve` draws its requests from.

Each shape is pure data with its source: a prompt-length and an output-length distribution
(`app.engine.workload`) standing for what `vllm bench serve --dataset-name NAME` sends, so that a
simulation or a plan can be asked about "ShareGPT traffic" and compared with a benchmark of it.

- `sharegpt`: vLLM samples `ShareGPT_V3_unfiltered_cleaned_split.json`, keeps conversations of
  at least two turns, takes the first human turn as the prompt and the first reply's token
  count as the request's `max_tokens`, and drops a pair when the prompt or the reply has fewer
  than 4 tokens, the prompt more than 1,024, or both together more than 2,048
  (`vllm/benchmarks/datasets/utils.py::is_valid_sequence`, defaults `min_len=4`,
  `max_prompt_len=1024`, `max_total_len=2048`). Published: 1,000 such requests (seed 0,
  Llama-3.1-8B-Instruct's tokenizer) carry 215,196 prompt tokens, and the model generates
  196,961 to 197,328 tokens for them (five runs in vllm-project/vllm#15720 and #17004): a mean
  prompt of 215.2 tokens and a mean output of 197.1. The outputs are what the model generated
  (it stops at its end-of-sequence token before the reference reply's length unless
  `--ignore-eos`), so early stops are in the output shape. The spread is not published: each
  side is a log-normal of shape sigma = 1.0 (an assumption, stated), cut to the filter's
  bounds and with its median solved so that the cut distribution has the published mean.
- `sonnet`: Shakespeare's sonnets, `--sonnet-input-len 550 --sonnet-prefix-len 200
  --sonnet-output-len 150` by default (`vllm/benchmarks/datasets/sonnet.py`); vLLM keeps only
  prompts of at most `input_len` tokens, built from whole lines, so they fall just below it:
  taken as exactly `input_len`. The first `prefix_len` tokens are the same in every prompt
  (a shared prefix for prefix caching). The output length is `max_tokens`, reached when the
  benchmark runs with `--ignore-eos`.
- `random`: `--random-input-len 1024 --random-output-len 128 --random-range-ratio 0.0` by
  default; each length is uniform over the whole numbers from `floor(n * (1 - r))` to
  `ceil(n * (1 + r))` (`vllm/benchmarks/datasets/random.py::get_sampling_params`; outputs at
  least 1). vLLM also takes the tokenizer's special tokens off the prompt length; here they
  are left in.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from statistics import NormalDist
from typing import Final

from app.engine.specs import SpecError
from app.engine.workload import HistogramLengths

__all__ = [
    "RANDOM_DEFAULTS",
    "SHAREGPT",
    "SONNET_DEFAULTS",
    "SONNET_PREFIX_TOKENS",
    "Dataset",
    "DatasetLengths",
    "LengthDefaults",
    "LogNormalCut",
    "PublishedLengths",
    "Side",
    "dataset_lengths",
    "uniform_lengths",
]


class Dataset(StrEnum):
    """A dataset of `vllm bench serve --dataset-name`."""

    SHAREGPT = "sharegpt"
    SONNET = "sonnet"
    RANDOM = "random"


class Side(StrEnum):
    """Which length of a request: its prompt or its output."""

    PROMPT = "prompt"
    OUTPUT = "output"


@dataclass(frozen=True, slots=True)
class PublishedLengths:
    """What a source published about one side of a dataset as vLLM's benchmark samples it."""

    mean_tokens: float
    min_tokens: int
    max_tokens: int
    source: str


@dataclass(frozen=True, slots=True)
class LogNormalCut:
    """A log-normal of median `median_tokens` and shape `sigma`, rounded to whole tokens and
    kept between `min_tokens` and `max_tokens` (what falls outside is dropped, as vLLM's length
    filter drops it, not piled on the bounds)."""

    median_tokens: float
    sigma: float
    min_tokens: int
    max_tokens: int

    def lengths(self) -> HistogramLengths:
        """One histogram bin per whole length; bin n holds the log-normal's mass that rounds
        to n."""
        if not (self.median_tokens > 0 and self.sigma > 0):
            raise SpecError("sigma", "a log-normal needs a positive median and shape")
        if not 1 <= self.min_tokens <= self.max_tokens:
            raise SpecError("max_tokens", "needs 1 <= min_tokens <= max_tokens")
        shape = NormalDist(math.log(self.median_tokens), self.sigma)
        cuts = [
            shape.cdf(math.log(n - 0.5)) if n > 1 else 0.0
            for n in range(self.min_tokens, self.max_tokens + 2)
        ]
        weights = tuple(hi - lo for lo, hi in itertools.pairwise(cuts))
        edges = tuple(range(self.min_tokens, self.max_tokens + 2))
        return HistogramLengths(edges_tokens=edges, weights=weights)


@dataclass(frozen=True, slots=True)
class DatasetLengths:
    """One named shape: its two sides, as published and as sampled."""

    prompt: PublishedLengths
    output: PublishedLengths
    prompt_shape: LogNormalCut
    output_shape: LogNormalCut


_SHAREGPT_RUNS: Final = (
    "vllm-project/vllm#17004 and #15720: `benchmark_serving.py --dataset-name sharegpt "
    "--num-prompts 1000` (seed 0) on Llama-3.1-8B-Instruct: 215,196 prompt tokens; "
    "196,961-197,328 generated tokens in five runs"
)
SHAREGPT: Final = DatasetLengths(
    prompt=PublishedLengths(
        mean_tokens=215.196,
        min_tokens=4,
        max_tokens=1024,
        source=_SHAREGPT_RUNS + "; bounds: vLLM's is_valid_sequence (min_len 4, "
        "max_prompt_len 1024)",
    ),
    output=PublishedLengths(
        mean_tokens=197.1,
        min_tokens=1,
        max_tokens=1024,
        source=_SHAREGPT_RUNS + "; generated lengths, ended by the model's end-of-sequence "
        "token; at most 2,048 minus the prompt (max_total_len), here at most 1,024 so that "
        "independent draws keep the total",
    ),
    # Medians solved so that each cut log-normal (sigma 1.0, assumed) has the published mean.
    prompt_shape=LogNormalCut(median_tokens=156.1, sigma=1.0, min_tokens=4, max_tokens=1024),
    output_shape=LogNormalCut(median_tokens=138.9, sigma=1.0, min_tokens=1, max_tokens=1024),
)


@dataclass(frozen=True, slots=True)
class LengthDefaults:
    """vLLM's default lengths for a synthetic dataset."""

    input_len: int
    output_len: int
    source: str


SONNET_DEFAULTS: Final = LengthDefaults(
    input_len=550,
    output_len=150,
    source="vllm/benchmarks/datasets/sonnet.py: DEFAULT_INPUT_LEN 550, DEFAULT_PREFIX_LEN "
    "200, DEFAULT_OUTPUT_LEN 150",
)
SONNET_PREFIX_TOKENS: Final = 200
"""`--sonnet-prefix-len`: the lines every sonnet prompt starts with."""
RANDOM_DEFAULTS: Final = LengthDefaults(
    input_len=1024,
    output_len=128,
    source="vllm/benchmarks/datasets/random.py: DEFAULT_INPUT_LEN 1024, DEFAULT_OUTPUT_LEN "
    "128, DEFAULT_RANGE_RATIO 0.0",
)


def uniform_lengths(
    mean_tokens: int, range_ratio: float, *, min_tokens: int = 1
) -> HistogramLengths:
    """Whole lengths uniform from floor(n(1 - r)) to ceil(n(1 + r)) inclusive, as vLLM's random
    dataset draws them (`RandomDataset.get_sampling_params`); the low end at least
    `min_tokens`."""
    if mean_tokens < 1:
        raise SpecError("mean_tokens", f"must be at least 1, got {mean_tokens}")
    if not 0 <= range_ratio < 1:
        raise SpecError("range_ratio", f"must be in [0, 1), got {range_ratio}")
    # vLLM: low = floor(n * (1 - r)), high = ceil(n * (1 + r)), integers(low, high + 1).
    low = max(math.floor(mean_tokens * (1 - range_ratio)), min_tokens)
    high = max(math.ceil(mean_tokens * (1 + range_ratio)), low)
    return HistogramLengths(edges_tokens=(low, high + 1), weights=(1.0,))


@cache
def _sharegpt(side: Side) -> HistogramLengths:
    shape = SHAREGPT.prompt_shape if side is Side.PROMPT else SHAREGPT.output_shape
    return shape.lengths()


def dataset_lengths(
    dataset: Dataset, side: Side, mean_tokens: int | None = None, range_ratio: float = 0.0
) -> HistogramLengths:
    """The lengths `vllm bench serve --dataset-name dataset` sends on `side`. `mean_tokens`
    stands for `--{dataset}-input-len` (prompt) or `--{dataset}-output-len` (output), default
    vLLM's; `range_ratio` for `--random-range-ratio`. ShareGPT takes neither (its lengths are
    the data's)."""
    if dataset is Dataset.SHAREGPT:
        if mean_tokens is not None or range_ratio:
            raise SpecError("dataset", "sharegpt's lengths are the data's: no mean_tokens")
        return _sharegpt(side)
    defaults = SONNET_DEFAULTS if dataset is Dataset.SONNET else RANDOM_DEFAULTS
    default = defaults.input_len if side is Side.PROMPT else defaults.output_len
    length = default if mean_tokens is None else mean_tokens
    if dataset is Dataset.SONNET:
        if range_ratio:
            raise SpecError("range_ratio", "applies to the random dataset only")
        return uniform_lengths(length, 0.0)
    return uniform_lengths(length, range_ratio)
