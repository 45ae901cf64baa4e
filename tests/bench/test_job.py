"""The job end to end on the CPU: a real run through `main`, and what it survives (an
out-of-memory point, Ctrl-C, a refused upload)."""

from __future__ import annotations

import json
import math
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

torch = pytest.importorskip("torch")

from app.bench.__main__ import main  # noqa: E402 - after the importorskip
from app.bench.cli import interrupt_on_termination, parse_options, run  # noqa: E402
from app.bench.config import BenchConfig, PointPlan  # noqa: E402
from app.bench.memory import PredictedOutOfMemory  # noqa: E402
from app.bench.model import Decoder  # noqa: E402
from app.bench.timing import TimingStats  # noqa: E402
from app.bench.workload import TorchWorkload  # noqa: E402
from app.formats.run_document import (  # noqa: E402
    INTERRUPTED_REASON,
    AttentionBackend,
    DeviceKind,
    Microbenchmarks,
    Phase,
    RunDocument,
    RunModelSpec,
)

from .conftest import TINY_ENTRY  # noqa: E402


def _argv(config: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--config",
        str(config),
        "--device",
        "cpu",
        "--threads",
        "1",
        "--out",
        str(out),
        *extra,
    ]


def _load(path: Path) -> RunDocument:
    return RunDocument.model_validate_json(path.read_text(encoding="utf-8"))


def test_job_measures_a_tiny_model_on_the_cpu(tiny_config_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    status = main(
        _argv(
            tiny_config_path,
            out,
            "--prompt-lens",
            "16,32,64",
            "--decode-batches",
            "1,2",
            "--kv-lens",
            "32,64",
            "--repeats",
            "3",
            "--warmup",
            "1",
        )
    )
    assert status == 0
    document = _load(out)
    assert document.environment.device_kind is DeviceKind.CPU
    assert document.environment.torch_version == torch.__version__
    assert document.dtype == "fp32"  # the CPU default
    assert document.attention_backend is AttentionBackend.CPU
    assert document.model.model_dump() == TINY_ENTRY | {"id": None}
    assert document.gpu is None
    planned = [(p.phase, p.batch_size, p.tokens) for p in document.points]
    assert planned == [
        (Phase.PREFILL, 1, 16),
        (Phase.PREFILL, 1, 32),
        (Phase.PREFILL, 1, 64),
        (Phase.DECODE, 1, 32),  # decode by cache size B * c, then batch
        (Phase.DECODE, 1, 64),
        (Phase.DECODE, 2, 32),
        (Phase.DECODE, 2, 64),
    ]
    for point in document.points:
        assert point.skipped is None
        assert point.repeats == 3
        assert point.p10_ms is not None and point.median_ms is not None
        assert point.p90_ms is not None
        assert all(math.isfinite(t) and t > 0 for t in (point.p10_ms, point.median_ms))
        assert point.p10_ms <= point.median_ms <= point.p90_ms
    micro = document.microbenchmarks
    assert micro is not None
    assert micro.matmul_shape == (1024, 1024, 1024)
    assert micro.copy_bytes == 64 * 2**20
    assert micro.matmul_flops_per_s > 1e8  # any CPU of this century does 0.1 GFLOP/s
    assert micro.copy_bytes_per_s > 1e8
    # The file is the document's own JSON: stable on a second dump.
    assert json.loads(out.read_text(encoding="utf-8")) == json.loads(document.model_dump_json())


class _FailingAt(TorchWorkload):
    """The real workload, whose forward pass fails at one prompt length."""

    def __init__(self, config: BenchConfig, error: BaseException, prompt_tokens: int) -> None:
        super().__init__(config)
        self.error = error
        self.prompt_tokens = prompt_tokens
        self.releases = 0

    def measure(self, point: PointPlan) -> TimingStats:
        if point.prompt_tokens == self.prompt_tokens:
            raise self.error
        return super().measure(point)

    def release(self) -> None:
        self.releases += 1
        super().release()


_SMALL_RUN = ("--prompt-lens", "16,32,64", "--kv-lens", "", "--repeats", "1", "--warmup", "0")

OOM_ERRORS = {
    "cuda": torch.cuda.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 64.00 GiB. GPU 0 has a total capacity of 139.8 GiB"
    ),
    "cpu-allocator": RuntimeError(
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
        "memory: you tried to allocate 100000000000000 bytes."
    ),
    "hip": RuntimeError("HIP out of memory. Tried to allocate 2.00 GiB"),
    "memory-error": MemoryError(),
}


@pytest.mark.parametrize("error", OOM_ERRORS.values(), ids=OOM_ERRORS.keys())
def test_out_of_memory_point_is_skipped_and_the_run_goes_on(
    error: BaseException, tiny_config_path: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run.json"
    workloads: list[_FailingAt] = []

    def factory(config: BenchConfig) -> _FailingAt:
        workloads.append(_FailingAt(config, error, prompt_tokens=32))
        return workloads[-1]

    options = parse_options(_argv(tiny_config_path, out, *_SMALL_RUN))
    assert run(options, workload_factory=factory) == 0
    document = _load(out)
    skipped = {p.prompt_tokens: p.skipped for p in document.points}
    assert skipped[16] is None
    assert skipped[64] is None
    reason = skipped[32]
    assert reason is not None
    assert reason.reason.startswith("out of memory")
    assert str(error).split(".")[0] in reason.reason  # the first words of the error stay
    assert workloads[0].releases == 3  # memory given back after every point, the failed one too


def test_other_errors_are_not_taken_for_out_of_memory(
    tiny_config_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A broken point fails the run (exit 1, traceback and message on stderr, nothing uploaded)
    # but keeps the points measured before it: GPU time is too scarce to throw them away.
    error = RuntimeError("mat1 and mat2 shapes cannot be multiplied (16x256 and 512x256)")
    out = tmp_path / "run.json"
    options = parse_options(_argv(tiny_config_path, out, *_SMALL_RUN))
    assert run(options, workload_factory=lambda config: _FailingAt(config, error, 32)) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert "the run broke at prefill n=32 B=1: RuntimeError: mat1 and mat2 shapes" in err
    document = _load(out)
    assert document.points[0].median_ms is not None
    for point in document.points[1:]:
        assert point.skipped is not None
        assert point.skipped.reason == (
            "not measured: the run broke at prefill n=32 B=1: RuntimeError: mat1 and mat2 "
            "shapes cannot be multiplied (16x256 and 512x256)"
        )


def test_weights_that_do_not_fit_skip_every_point(tiny_config_path: Path, tmp_path: Path) -> None:
    class _NoRoom(TorchWorkload):
        def prepare(self) -> None:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 140.00 GiB")

    out = tmp_path / "run.json"
    options = parse_options(_argv(tiny_config_path, out, *_SMALL_RUN))
    assert run(options, workload_factory=_NoRoom) == 0
    document = _load(out)
    assert len(document.points) == 3
    for point in document.points:
        assert point.skipped is not None
        assert "out of memory" in point.skipped.reason
        assert "while allocating the model's weights" in point.skipped.reason


def test_ctrl_c_writes_what_was_measured(tiny_config_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    argv = _argv(
        tiny_config_path,
        out,
        "--prompt-lens",
        "16,32",
        "--decode-batches",
        "1,2",
        "--kv-lens",
        "32",
        "--repeats",
        "1",
        "--warmup",
        "0",
    )

    class _CtrlCAtDecode(TorchWorkload):
        def measure(self, point: PointPlan) -> TimingStats:
            if point.phase is Phase.DECODE:
                raise KeyboardInterrupt
            return super().measure(point)

    assert run(parse_options(argv), workload_factory=_CtrlCAtDecode) == 130
    document = _load(out)
    assert [(p.phase, p.skipped is None) for p in document.points] == [
        (Phase.PREFILL, True),
        (Phase.PREFILL, True),
        (Phase.DECODE, False),
        (Phase.DECODE, False),
    ]
    assert all(p.median_ms is not None for p in document.points[:2])
    for point in document.points[2:]:
        assert point.skipped is not None
        assert point.skipped.reason == INTERRUPTED_REASON
        assert point.median_ms is None
    assert document.microbenchmarks is not None


def test_ctrl_c_before_any_point_still_writes_a_valid_document(
    tiny_config_path: Path, tmp_path: Path
) -> None:
    class _CtrlCAtOnce(TorchWorkload):
        def microbenchmarks(self) -> Microbenchmarks:
            raise KeyboardInterrupt

    out = tmp_path / "run.json"
    options = parse_options(_argv(tiny_config_path, out, *_SMALL_RUN))
    assert run(options, workload_factory=_CtrlCAtOnce) == 130
    document = _load(out)
    assert document.microbenchmarks is None
    assert document.attention_backend is None  # the model was never built
    assert {p.skipped.reason for p in document.points if p.skipped} == {INTERRUPTED_REASON}
    assert len(document.points) == 3


def _quick(config: Path, out: Path, *extra: str) -> list[str]:
    return _argv(config, out, "--prompt-lens", "16", "--kv-lens", "", "--repeats", "1", *extra)


def test_upload_prints_the_id(
    tiny_config_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bodies: list[dict[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url == "http://ridgeline.test/v1/benchmark-runs"
        assert request.headers["Authorization"] == "Bearer k3y"
        bodies.append(json.loads(request.content))
        return httpx.Response(201, json={"id": "run-7"})

    out = tmp_path / "run.json"
    argv = _quick(tiny_config_path, out, "--upload", "http://ridgeline.test", "--api-key", "k3y")
    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        assert run(parse_options(argv), http_client=client) == 0
    assert capsys.readouterr().out == "run-7\n"
    assert bodies == [json.loads(out.read_text(encoding="utf-8"))]


def test_failed_upload_keeps_the_file_and_reports_the_problem(
    tiny_config_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        problem = {"title": "Unauthorized", "status": 401, "detail": "unknown API key"}
        return httpx.Response(401, json=problem)

    out = tmp_path / "run.json"
    argv = _quick(tiny_config_path, out, "--upload", "http://ridgeline.test", "--api-key", "bad")
    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        assert run(parse_options(argv), http_client=client) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "HTTP 401: Unauthorized: unknown API key" in captured.err
    assert f"the run is kept in {out}" in captured.err
    assert _load(out).points[0].median_ms is not None


def test_fewer_layers_and_a_longer_context_are_recorded(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    short_context = {
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 32,
    }
    config.write_text(json.dumps(short_context), encoding="utf-8")
    out = tmp_path / "run.json"
    argv = _argv(config, out, "--layers", "1", "--prompt-lens", "16,48", "--kv-lens", "40")
    assert main([*argv, "--decode-batches", "1", "--repeats", "1"]) == 0
    document = _load(out)
    assert document.model.num_layers == 1
    assert document.model.max_context_tokens == 48  # the longest length that ran
    note = document.provenance.note or ""
    assert "1 of the architecture's 2 layers ran" in note
    assert "max_context_tokens raised from 32 to 48" in note


def test_moe_and_unknown_models_are_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    assert main(["--model", "mixtral-8x7b", "--device", "cpu", "--out", str(out)]) == 2
    assert "mixture-of-experts" in capsys.readouterr().err
    assert main(["--model", "llama-9-1t", "--device", "cpu", "--out", str(out)]) == 2
    assert "no model 'llama-9-1t'" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["--device", "cpu"],  # neither --model nor --config
        ["--model", "llama-3-8b", "--config", "c.json"],
        ["--model", "llama-3-8b", "--prompt-lens", "512,0"],
        ["--model", "llama-3-8b", "--prompt-lens", "512,x"],
        ["--model", "llama-3-8b", "--dtype", "fp8"],
        ["--model", "llama-3-8b", "--device", "tpu"],
        ["--model", "llama-3-8b", "--repeats", "0"],
        ["--model", "llama-3-8b", "--upload", "http://ridgeline.test"],  # no API key
    ],
)
def test_bad_arguments_exit_with_usage(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RIDGELINE_API_KEY", raising=False)
    with pytest.raises(SystemExit) as raised:
        parse_options(argv)
    assert raised.value.code == 2


def test_flags_parse_into_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIDGELINE_API_KEY", "from-env")
    options = parse_options(
        [
            "--model",
            "llama-3-8b",
            "--dtype",
            "fp16",
            "--prompt-lens",
            "512, 1024,2048",
            "--prefill-batch",
            "4",
            "--decode-batches",
            "1,8",
            "--kv-lens",
            "512",
            "--upload",
            "http://ridgeline.test",
            "--gpu",
            "h200-sxm-141gb",
            "--seed",
            "7",
        ]
    )
    assert options.prompt_lens == (512, 1024, 2048)
    assert options.prefill_batch == 4
    assert options.decode_batches == (1, 8)
    assert options.dtype == "fp16"
    assert options.api_key == "from-env"
    assert options.gpu == "h200-sxm-141gb"
    assert options.seed == 7
    assert options.device is None  # decided once PyTorch says whether a GPU is there


def test_service_resolves_the_model_and_gpu_id_is_recorded(tmp_path: Path) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url == "http://ridgeline.test/v1/models/tiny-llama"
        return httpx.Response(200, json=TINY_ENTRY | {"params_total": 1_692_928})

    out = tmp_path / "run.json"
    argv = ["--model", "tiny-llama", "--service", "http://ridgeline.test", "--gpu", "my-gpu"]
    argv += ["--device", "cpu", "--prompt-lens", "16", "--kv-lens", "", "--repeats", "1"]
    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        assert run(parse_options([*argv, "--out", str(out)]), http_client=client) == 0
    document = _load(out)
    assert document.model.model_dump() == TINY_ENTRY
    assert document.gpu == "my-gpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without")
def test_cuda_without_a_gpu_is_a_usage_error(
    tiny_config_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    assert main(["--config", str(tiny_config_path), "--device", "cuda", "--out", str(out)]) == 2
    assert "PyTorch sees no CUDA device" in capsys.readouterr().err
    assert not out.exists()


def _tiny_config(**changes: Any) -> BenchConfig:
    fields: dict[str, Any] = {
        "model": RunModelSpec.model_validate(TINY_ENTRY),
        "device": DeviceKind.CPU,
        "dtype": "fp32",
        "prompt_lens": (16,),
        "prefill_batches": (1,),
        "decode_batches": (2,),
        "kv_lens": (32,),
        "repeats": 3,
        "warmup": 0,
    } | changes
    return BenchConfig(**fields)


def test_a_longer_prompt_measures_longer() -> None:
    # 256 tokens carry 16x the GEMM work of 16 (several times the time even on this tiny model,
    # where fixed per-layer costs weigh). The fastest of seven runs sheds most of a shared CPU's
    # noise, and a burst of it on the short point gets two more tries; a job that timed the
    # wrong thing (or nothing) fails all three.
    workload = TorchWorkload(_tiny_config(prompt_lens=(16, 256), warmup=2, repeats=7))
    with torch.inference_mode():
        workload.prepare()
    ratios = []
    for _ in range(3):
        short, long = (
            workload.measure(PointPlan(Phase.PREFILL, batch_size=1, prompt_tokens=n)).p10_ms
            for n in (16, 256)
        )
        assert short is not None and long is not None
        ratios.append(long / short)
        if ratios[-1] > 2.0:
            break
    assert max(ratios) > 2.0, ratios


class _FirstUseTimer:
    """A timer whose every operation costs 1000 ms the first time it runs (kernel selection,
    workspaces, a graph's upload) and 1 ms after; it logs what ran while it timed."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.timing = False
        self.log: list[str] = []

    def __call__(self, operation: Callable[[], object], /) -> float:
        first = id(operation) not in self.seen
        self.seen.add(id(operation))
        self.timing = True
        try:
            operation()
        finally:
            self.timing = False
        return 1000.0 if first else 1.0


def _spy_on_decoder(workload: TorchWorkload, timer: _FirstUseTimer) -> None:
    """Log each Decoder call, and whether the timer was running when it was made."""
    decoder = workload._decoder
    assert decoder is not None
    for name in ("prefill", "decode_step", "new_kv_cache", "random_tokens"):
        original = getattr(Decoder, name)

        def spy(*args: Any, _original: Any = original, _name: str = name) -> Any:
            timer.log.append(f"{_name}{' (timed)' if timer.timing else ''}")
            return _original(decoder, *args)

        setattr(decoder, name, spy)


def test_no_first_use_and_nothing_but_the_forward_pass_is_timed() -> None:
    # --warmup 0 asks for no warm-up: one untimed run happens regardless, so the 1000 ms first
    # use is not in the statistics; inputs and the KV cache are made before any timing.
    workload = TorchWorkload(_tiny_config(warmup=0, repeats=3))
    timer = _FirstUseTimer()
    workload._timer = timer
    with torch.inference_mode():
        workload.prepare()
    _spy_on_decoder(workload, timer)
    prefill = workload.measure(PointPlan(Phase.PREFILL, batch_size=1, prompt_tokens=16))
    decode = workload.measure(PointPlan(Phase.DECODE, batch_size=2, context_tokens=32))
    for stats in (prefill, decode):
        assert (stats.median_ms, stats.p10_ms, stats.p90_ms, stats.repeats) == (1.0, 1.0, 1.0, 3)
    assert timer.log == [
        "random_tokens",
        *["prefill (timed)"] * 4,  # one warm-up, three timed
        "new_kv_cache",
        "random_tokens",
        *["decode_step (timed)"] * 4,
    ]


def test_cuda_graph_replays_are_what_is_timed() -> None:
    # The capture path with a stand-in for the CUDA graph: one eager run pays the first use,
    # the capture follows, and only replays go through the timer (one warm-up replay first).
    workload = TorchWorkload(_tiny_config(warmup=0, repeats=2))
    timer = _FirstUseTimer()
    workload._timer = timer
    events: list[str] = []

    def capture(operation: Callable[[], object]) -> Callable[[], object]:
        operation()
        events.append("eager run, then capture")

        def replay() -> None:
            events.append("replay (timed)" if timer.timing else "replay")
            operation()

        return replay

    workload._capture = capture
    with torch.inference_mode():
        workload.prepare()
        stats = workload.measure(PointPlan(Phase.DECODE, batch_size=2, context_tokens=32))
    assert events == ["eager run, then capture", *["replay (timed)"] * 3]
    assert stats.median_ms == 1.0
    assert not any("capture failed" in note for note in workload.notes())


def test_a_failed_capture_falls_back_to_eager_timing_and_says_so() -> None:
    workload = TorchWorkload(_tiny_config(warmup=1, repeats=2))
    workload._timer = _FirstUseTimer()

    def capture(operation: Callable[[], object]) -> Callable[[], object]:
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    workload._capture = capture
    with torch.inference_mode():
        workload.prepare()
        stats = workload.measure(PointPlan(Phase.PREFILL, batch_size=1, prompt_tokens=16))
    assert stats.median_ms == 1.0
    (note,) = [note for note in workload.notes() if "capture failed" in note]
    assert "prefill n=16 B=1 (CUDA error: operation not permitted" in note


def test_out_of_memory_inside_a_capture_is_not_retried_eagerly() -> None:
    workload = TorchWorkload(_tiny_config())

    def capture(operation: Callable[[], object]) -> Callable[[], object]:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.00 GiB")

    workload._capture = capture
    with torch.inference_mode():
        workload.prepare()
        with pytest.raises(torch.cuda.OutOfMemoryError):
            workload.measure(PointPlan(Phase.PREFILL, batch_size=1, prompt_tokens=16))


class _SmallDevice(TorchWorkload):
    """The real workload on a device with `free` bytes free, which logs its KV caches."""

    free: int | None = 8 * 2**20
    weights_free: int | None = None  # while the weights are allocated

    def __init__(self, config: BenchConfig) -> None:
        super().__init__(config)
        self.caches: list[tuple[int, int]] = []
        self.preparing = False

    def free_memory_bytes(self) -> int | None:
        return self.weights_free if self.preparing else self.free

    def prepare(self) -> None:
        self.preparing = True
        try:
            super().prepare()
        finally:
            self.preparing = False
        decoder = self._decoder
        assert decoder is not None
        original = decoder.new_kv_cache

        def logged(batch: int, context_tokens: int) -> Any:
            self.caches.append((batch, context_tokens))
            return original(batch, context_tokens)

        decoder.new_kv_cache = logged  # type: ignore[method-assign]


def test_a_kv_cache_that_cannot_fit_is_skipped_before_it_is_allocated(
    tiny_config_path: Path, tmp_path: Path
) -> None:
    # 8 MiB free: decode B=64 over 32 tokens (4 MiB of cache) fits; B=64 over 512 (64 MiB of
    # fp32 cache: 2 layers x K and V x 64 x 2 heads x 512 x 64 x 4 bytes) does not.
    out = tmp_path / "run.json"
    workloads: list[_SmallDevice] = []

    def factory(config: BenchConfig) -> _SmallDevice:
        workloads.append(_SmallDevice(config))
        return workloads[-1]

    argv = _argv(tiny_config_path, out, "--prompt-lens", "16", "--decode-batches", "1,64")
    argv += ["--kv-lens", "32,512", "--repeats", "1", "--warmup", "0"]
    assert run(parse_options(argv), workload_factory=factory) == 0
    document = _load(out)
    skipped = {(p.batch_size, p.context_tokens): p.skipped for p in document.points}
    assert skipped[(1, 32)] is None and skipped[(1, 512)] is None and skipped[(64, 32)] is None
    reason = skipped[(64, 512)]
    assert reason is not None
    assert reason.reason == (
        "out of memory: predicted before allocating: the KV cache of 64 x 512 tokens takes "
        "64.0 MiB, plus at least 0.9 MiB of activations; 8.0 MiB free beside the weights"
    )
    # Never allocated, not even tried: a 256 GiB cache would take minutes to fail.
    assert (64, 512) not in workloads[0].caches
    assert sorted(workloads[0].caches) == [(1, 32), (1, 512), (64, 32)]


def test_weights_that_cannot_fit_are_refused_before_they_are_allocated(
    tiny_config_path: Path, tmp_path: Path
) -> None:
    class _NoRoomForWeights(_SmallDevice):
        weights_free = 2**20  # the tiny model's fp32 weights take 6.5 MiB

    out = tmp_path / "run.json"
    options = parse_options(_argv(tiny_config_path, out, *_SMALL_RUN))
    assert run(options, workload_factory=_NoRoomForWeights) == 0
    for point in _load(out).points:
        assert point.skipped is not None
        assert point.skipped.reason.startswith(
            "out of memory: predicted before allocating: the weights take 6.5 MiB, 1.0 MiB free"
        )
        assert point.skipped.reason.endswith("(while allocating the model's weights)")


def test_predicted_out_of_memory_is_a_memory_error() -> None:
    assert issubclass(PredictedOutOfMemory, MemoryError)


def test_sigterm_ends_the_run_like_ctrl_c(tiny_config_path: Path, tmp_path: Path) -> None:
    # The device script stops the job at its deadline with `timeout` (SIGTERM): the points
    # measured so far must be written, the rest marked interrupted, as with Ctrl-C.
    class _TermAtDecode(TorchWorkload):
        def measure(self, point: PointPlan) -> TimingStats:
            if point.phase is Phase.DECODE:
                signal.raise_signal(signal.SIGTERM)
            return super().measure(point)

    out = tmp_path / "run.json"
    argv = _argv(tiny_config_path, out, "--prompt-lens", "16", "--decode-batches", "1")
    argv += ["--kv-lens", "32", "--repeats", "1"]
    before = signal.getsignal(signal.SIGTERM)
    with interrupt_on_termination():
        assert run(parse_options(argv), workload_factory=_TermAtDecode) == 130
    assert signal.getsignal(signal.SIGTERM) is before
    document = _load(out)
    assert document.points[0].median_ms is not None
    assert document.points[1].skipped is not None
    assert document.points[1].skipped.reason == INTERRUPTED_REASON


def test_timing_flags_and_defaults() -> None:
    options = parse_options(["--model", "llama-3-8b"])
    assert options.cuda_graphs is True
    assert options.repeats == 10
    assert parse_options(["--model", "llama-3-8b", "--no-cuda-graphs"]).cuda_graphs is False
