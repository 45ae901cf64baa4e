"""Named dataset shapes against what their sources publish.

ShareGPT: the mean prompt (215.2 tokens) and mean generated output (197.1) of 1,000 requests of
`benchmark_serving.py --dataset-name sharegpt` on Llama-3.1-8B-Instruct (vllm-project/vllm#17004,
#15720), inside vLLM's length filter. Sonnet and random: vLLM's defaults and its uniform range.
Samples are 10**6 draws with a fixed seed: a mean's standard error is then about 0.1 % (the
coefficient of variation is under 1.1), so the 1 % tolerances below are ten of them; the shape's
own mean is within 0.05 % of the published one (its median is rounded to 0.1 token).
"""

import math

import numpy as np
import pytest

from app.engine.datasets import (
    RANDOM_DEFAULTS,
    SHAREGPT,
    SONNET_DEFAULTS,
    Dataset,
    LogNormalCut,
    Side,
    dataset_lengths,
    uniform_lengths,
)
from app.engine.specs import SpecError

SAMPLES = 1_000_000


def draw(dataset: Dataset, side: Side, **settings: float) -> np.ndarray:
    lengths = dataset_lengths(dataset, side, **settings)  # type: ignore[arg-type]
    return lengths.sample(np.random.default_rng(11), SAMPLES)


@pytest.mark.parametrize(
    ("side", "published_mean", "low", "high"),
    [
        # 215,196 prompt tokens over 1,000 requests; vLLM keeps prompts of 4 to 1,024 tokens.
        (Side.PROMPT, 215.196, 4, 1024),
        # 196,961-197,328 generated tokens over the same 1,000 (five runs): 197.1 on average.
        (Side.OUTPUT, 197.1, 1, 1024),
    ],
)
def test_sharegpt_samples_have_the_published_means_inside_vllms_filter(
    side: Side, published_mean: float, low: int, high: int
) -> None:
    sample = draw(Dataset.SHAREGPT, side)
    assert sample.mean() == pytest.approx(published_mean, rel=0.01)
    assert sample.min() >= low and sample.max() <= high
    # Dropped, not clamped: the bounds hold no pile of clamped samples (a log-normal of
    # sigma 1 puts under 0.1 % of its mass on one whole length near 1,024).
    assert np.mean(sample == high) < 0.001
    # Every prompt and output drawn together stays within vLLM's 2,048-token total.
    assert SHAREGPT.prompt.max_tokens + SHAREGPT.output.max_tokens <= 2048


def test_sharegpt_cut_log_normal_mean_is_the_published_one_exactly() -> None:
    """The shape's own mean (no sampling error): sum of n * P(n) over its bins."""
    for shape, published in (
        (SHAREGPT.prompt_shape, SHAREGPT.prompt),
        (SHAREGPT.output_shape, SHAREGPT.output),
    ):
        lengths = shape.lengths()
        total = math.fsum(lengths.weights)
        mean = math.fsum(
            n * w / total for n, w in zip(lengths.edges_tokens, lengths.weights, strict=False)
        )
        assert mean == pytest.approx(published.mean_tokens, rel=5e-4)
        assert published.source.startswith("vllm-project/vllm#17004")


def test_a_cut_log_normal_keeps_its_median_when_the_cut_is_far() -> None:
    # Median 100, sigma 0.5: the bounds 1 and 10,000 lie 9 and 9 sigmas out, so nothing is cut.
    sample = LogNormalCut(100, 0.5, 1, 10_000).lengths().sample(np.random.default_rng(3), SAMPLES)
    assert np.median(sample) == pytest.approx(100, abs=1)
    # Log-normal mean: median * exp(sigma^2 / 2) = 113.3.
    assert sample.mean() == pytest.approx(100 * math.exp(0.125), rel=0.005)


def test_random_is_uniform_over_vllms_whole_number_range() -> None:
    # --random-input-len 1000 --random-range-ratio 0.1: integers 900 to 1,100, mean 1,000.
    sample = draw(Dataset.RANDOM, Side.PROMPT, mean_tokens=1000, range_ratio=0.1)
    assert (sample.min(), sample.max()) == (900, 1100)
    assert sample.mean() == pytest.approx(1000, rel=0.001)
    # 201 equally likely lengths: each about 1/201.
    counts = np.bincount(sample - 900)
    assert counts.min() / SAMPLES == pytest.approx(1 / 201, rel=0.05)
    # floor(7 * 0.7) = 4, ceil(7 * 1.3) = 10.
    odd = uniform_lengths(7, 0.3)
    assert odd.edges_tokens == (4, 11)


def test_random_and_sonnet_defaults_are_vllms() -> None:
    assert set(draw(Dataset.RANDOM, Side.PROMPT).tolist()) == {RANDOM_DEFAULTS.input_len}
    assert set(draw(Dataset.RANDOM, Side.OUTPUT).tolist()) == {128}
    assert set(draw(Dataset.SONNET, Side.PROMPT).tolist()) == {SONNET_DEFAULTS.input_len}
    assert set(draw(Dataset.SONNET, Side.OUTPUT).tolist()) == {150}
    # Outputs never drop below one token, whatever the ratio: floor(1 * 0.5) = 0 -> 1.
    assert uniform_lengths(1, 0.5).edges_tokens == (1, 3)


@pytest.mark.parametrize(
    ("dataset", "settings", "field"),
    [
        (Dataset.SHAREGPT, {"mean_tokens": 100}, "dataset"),
        (Dataset.RANDOM, {"range_ratio": 1.0}, "range_ratio"),
        (Dataset.RANDOM, {"mean_tokens": 0}, "mean_tokens"),
        (Dataset.SONNET, {"range_ratio": 0.2}, "range_ratio"),
    ],
)
def test_impossible_settings_name_their_field(
    dataset: Dataset, settings: dict[str, float], field: str
) -> None:
    with pytest.raises(SpecError) as error:
        dataset_lengths(dataset, Side.PROMPT, **settings)  # type: ignore[arg-type]
    assert error.value.field == field
