"""The runner's bookkeeping with a scripted workload (no PyTorch): plans, skips, progress."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.bench.config import BenchConfig, PointPlan, plan_points
from app.bench.memory import PredictedOutOfMemory
from app.bench.runner import is_out_of_memory, run_benchmark
from app.bench.timing import TimingStats
from app.formats.run_document import (
    INTERRUPTED_REASON,
    AttentionBackend,
    DeviceKind,
    Environment,
    Microbenchmarks,
    Phase,
    RunModelSpec,
)

from .conftest import TINY_ENTRY

SPEC = RunModelSpec.model_validate(TINY_ENTRY)
ENVIRONMENT = Environment(device_name="Scripted", device_kind=DeviceKind.CPU)


def _config(**changes: object) -> BenchConfig:
    fields: dict[str, object] = {
        "model": SPEC,
        "device": DeviceKind.CPU,
        "dtype": "fp32",
        "prompt_lens": (64, 16, 64),
        "prefill_batches": (1, 4),
        "decode_batches": (8, 1),
        "kv_lens": (128, 32),
        "repeats": 3,
        "warmup": 1,
    } | changes
    return BenchConfig(**fields)  # type: ignore[arg-type]


class _Scripted:
    """Answers every point with its length in ms, except the lengths told to fail."""

    def __init__(self, failures: dict[int, BaseException] | None = None) -> None:
        self.failures = failures or {}
        self.measured: list[PointPlan] = []
        self.releases = 0

    @property
    def attention_backend(self) -> AttentionBackend | None:
        return AttentionBackend.MATH

    def microbenchmarks(self) -> Microbenchmarks:
        return Microbenchmarks(
            matmul_flops_per_s=1e11,
            matmul_shape=(1024, 1024, 1024),
            copy_bytes_per_s=2e10,
            copy_bytes=2**26,
        )

    def prepare(self) -> None:
        return None

    def measure(self, point: PointPlan) -> TimingStats:
        length = point.prompt_tokens or point.context_tokens or 0
        if length in self.failures:
            raise self.failures[length]
        self.measured.append(point)
        return TimingStats(
            median_ms=float(length), p10_ms=length - 1.0, p90_ms=length + 1.0, repeats=3
        )

    def release(self) -> None:
        self.releases += 1

    def notes(self) -> tuple[str, ...]:
        return ("timed by a script",)


def test_plan_runs_prefill_then_decode_by_growing_size_without_duplicates() -> None:
    plans = plan_points(_config())
    assert [(p.phase, p.batch_size, p.prompt_tokens or p.context_tokens) for p in plans] == [
        (Phase.PREFILL, 1, 16),
        (Phase.PREFILL, 1, 64),
        (Phase.PREFILL, 4, 16),
        (Phase.PREFILL, 4, 64),
        (Phase.DECODE, 1, 32),  # 32 cached tokens
        (Phase.DECODE, 1, 128),  # 128
        (Phase.DECODE, 8, 32),  # 256
        (Phase.DECODE, 8, 128),  # 1024
    ]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dtype": "fp8"}, "dtype: the job runs bf16, fp16, fp32"),
        ({"prompt_lens": (16, 4096)}, "prompt_lens: [4096] exceed the model's max_context_tokens"),
        ({"kv_lens": (0,)}, "kv_lens: every value must be at least 1"),
        ({"repeats": 0}, "repeats: must be at least 1"),
        ({"warmup": -1}, "warmup: must not be negative"),
        ({"prompt_lens": (), "kv_lens": ()}, "nothing to measure"),
    ],
)
def test_config_refuses(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        _config(**changes)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8"), True),
        (MemoryError(), True),
        (RuntimeError("CUDA error: an illegal memory access was encountered"), False),
        (RuntimeError("No available kernel. Aborting execution."), False),
        (ValueError("out of memory"), False),  # only allocation errors are allocation failures
        (KeyboardInterrupt(), False),
    ],
)
def test_is_out_of_memory(error: BaseException, expected: bool) -> None:
    assert is_out_of_memory(error) is expected


def _chained(outer: BaseException, inner: BaseException) -> BaseException:
    """`outer` raised while `inner` was being handled, as Python chains them."""
    try:
        try:
            raise inner
        except BaseException:
            raise outer  # noqa: B904 - implicit chaining, as a context manager's __exit__ does
    except BaseException as error:
        return error


def test_out_of_memory_inside_a_graph_capture_is_still_out_of_memory() -> None:
    # An allocation failing while a CUDA graph is captured surfaces as the capture's own error
    # raised from the context manager's exit, with the out-of-memory error as its context.
    oom = RuntimeError("CUDA out of memory. Tried to allocate 9.00 GiB")
    error = _chained(RuntimeError("CUDA error: operation failed due to a previous error"), oom)
    assert is_out_of_memory(error)
    assert not is_out_of_memory(
        _chained(RuntimeError("CUDA error: illegal memory access"), ValueError("bad"))
    )
    workload = _Scripted({128: error})
    outcome = run_benchmark(
        _config(prefill_batches=(1,)), workload, environment=ENVIRONMENT, progress=False
    )
    reasons = {p.skipped.reason for p in outcome.document.points if p.skipped}
    assert reasons == {"out of memory: CUDA out of memory. Tried to allocate 9.00 GiB"}


def test_an_error_raised_while_interrupted_ends_the_run_as_interrupted() -> None:
    # Ctrl-C or SIGTERM inside a CUDA-graph capture surfaces as the capture's error, raised
    # while the KeyboardInterrupt propagates: that is an interruption, not a broken run.
    error = _chained(RuntimeError("CUDA error: operation not permitted"), KeyboardInterrupt())
    workload = _Scripted({32: error})
    outcome = run_benchmark(
        _config(prefill_batches=(1,)), workload, environment=ENVIRONMENT, progress=False
    )
    assert outcome.interrupted
    reasons = [p.skipped.reason if p.skipped else None for p in outcome.document.points]
    assert reasons == [None, None, *[INTERRUPTED_REASON] * 4]  # at the first decode point


def test_an_error_before_anything_is_measured_propagates() -> None:
    class _BrokenDevice(_Scripted):
        def microbenchmarks(self) -> Microbenchmarks:
            raise RuntimeError("CUDA error: no kernel image is available for execution")

    with pytest.raises(RuntimeError, match="no kernel image"):
        run_benchmark(_config(), _BrokenDevice(), environment=ENVIRONMENT, progress=False)


def test_a_broken_model_build_keeps_the_microbenchmarks() -> None:
    class _BrokenBuild(_Scripted):
        def prepare(self) -> None:
            raise ValueError("head_dim: rotary embedding needs an even width, got 63")

    outcome = run_benchmark(_config(), _BrokenBuild(), environment=ENVIRONMENT, progress=False)
    assert outcome.failure == (
        "building the model: ValueError: head_dim: rotary embedding needs an even width, got 63"
    )
    assert not outcome.interrupted
    assert outcome.document.microbenchmarks is not None
    assert {p.skipped.reason for p in outcome.document.points if p.skipped} == {
        f"not measured: the run broke at {outcome.failure}"
    }


def test_a_predicted_skip_is_recorded_with_its_prediction() -> None:
    prediction = PredictedOutOfMemory(
        "predicted before allocating: the KV cache of 8 x 128 tokens takes 256.0 GiB, plus at "
        "least 0.1 GiB of activations; 120.0 GiB free beside the weights"
    )
    workload = _Scripted({128: prediction})
    outcome = run_benchmark(
        _config(prefill_batches=(1,)), workload, environment=ENVIRONMENT, progress=False
    )
    skipped = [p for p in outcome.document.points if p.skipped is not None]
    assert [(p.batch_size, p.context_tokens) for p in skipped] == [(1, 128), (8, 128)]
    assert skipped[0].skipped is not None
    assert skipped[0].skipped.reason == f"out of memory: {prediction}"
    assert workload.releases == len(outcome.document.points)


def test_provenance_states_the_warmup_that_ran_and_the_workloads_notes() -> None:
    outcome = run_benchmark(_config(warmup=0), _Scripted(), environment=ENVIRONMENT, progress=False)
    note = outcome.document.provenance.note or ""
    # --warmup 0 still runs one untimed run per point: a first use is never timed.
    assert "1 warm-up and 3 timed runs per point" in note
    assert "timed by a script" in note


def test_skipped_points_carry_the_first_line_of_the_error() -> None:
    message = "CUDA out of memory. Tried to allocate 64.00 GiB.\nOf the allocated memory ..."
    workload = _Scripted({128: RuntimeError(message)})
    before = datetime.now(UTC)
    outcome = run_benchmark(
        _config(prefill_batches=(1,)), workload, environment=ENVIRONMENT, progress=False
    )
    assert not outcome.interrupted
    document = outcome.document
    assert before <= document.created_at <= datetime.now(UTC)
    skipped = [p for p in document.points if p.skipped is not None]
    assert [(p.batch_size, p.context_tokens) for p in skipped] == [(1, 128), (8, 128)]
    assert {p.skipped.reason for p in skipped if p.skipped} == {
        "out of memory: CUDA out of memory. Tried to allocate 64.00 GiB."
    }
    assert [p.median_ms for p in document.measured_points()] == [16.0, 64.0, 32.0, 32.0]
    assert workload.releases == len(document.points)
    assert document.attention_backend is AttentionBackend.MATH
    assert document.provenance.note is not None
    assert "1 warm-up and 3 timed runs per point" in document.provenance.note


def test_progress_bar_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    run_benchmark(_config(), _Scripted(), environment=ENVIRONMENT, progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "8/8" in captured.err  # tqdm's count of points done
