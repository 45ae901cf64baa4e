"""The command line of the benchmark job (`python -m app.bench`, `ridgeline-bench`).

    ridgeline-bench --model llama-3-8b --device cuda --dtype bf16 \\
        --prompt-lens 512,1024,4096 --decode-batches 1,8,32 --kv-lens 512,4096 \\
        --out run.json [--upload https://ridgeline.example --api-key KEY]
    ridgeline-bench --profile --model llama-3-8b --gpu h100-sxm5-80gb --engine vllm \\
        --engine-version 0.24.0 --out profile.json       (kernel profile: app/bench/profile.py)

Exit status: 0 done (and uploaded, if asked); 1 the upload failed (the file is kept) or the run
broke (the points measured before it are written); 2 bad arguments, an unknown or unsupported
model, or no PyTorch; 130 interrupted with Ctrl-C or SIGTERM (`timeout` sends it at a
deadline): the points measured so far are written, the rest marked "interrupted".

PyTorch is imported only once the arguments are read and a model resolved.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import httpx

from app.bench.catalog import (
    ModelResolutionError,
    bundled_entries,
    fetch_service_model,
    find_model,
    match_gpu_alias,
    model_from_config_file,
    run_model_spec,
)
from app.bench.config import (
    BENCH_DTYPES,
    DEFAULT_COPY_BYTES,
    DEFAULT_MATMUL_SIZE,
    BenchConfig,
)
from app.bench.report import format_summary
from app.bench.runner import BenchOutcome, Workload, run_benchmark
from app.bench.upload import UploadError, upload_run
from app.engine.dtypes import DType
from app.formats.run_document import DeviceKind, RunDocument, RunModelSpec

MISSING_EXTRA = (
    "needs PyTorch and tqdm, the bench extra. On a GPU node: pip install '.[bench]'. On a "
    "CPU-only machine, first the CPU build of PyTorch (a few hundred MB instead of several GB "
    "of CUDA wheels): pip install torch --index-url https://download.pytorch.org/whl/cpu, then "
    "pip install '.[bench]'"
)

__all__ = [
    "BenchOptions",
    "interrupt_on_termination",
    "main",
    "parse_options",
    "run",
    "write_document",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
API_KEY_ENV = "RIDGELINE_API_KEY"

WorkloadFactory = Callable[[BenchConfig], Workload]


@dataclass(frozen=True, slots=True)
class BenchOptions:
    """The parsed command line; None: decide from the device (or the catalog)."""

    model_id: str | None
    config_path: Path | None
    service_url: str | None
    device: DeviceKind | None
    dtype: DType | None
    layers: int | None
    prompt_lens: tuple[int, ...]
    prefill_batch: int
    decode_batches: tuple[int, ...]
    kv_lens: tuple[int, ...]
    repeats: int
    warmup: int
    out: Path | None
    upload_url: str | None
    api_key: str | None
    gpu: str | None
    seed: int
    threads: int | None
    cuda_graphs: bool = True


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _int_list(text: str) -> tuple[int, ...]:
    """`512,1024,...` (spaces and an empty list allowed: `--kv-lens ""` measures no decode)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    return tuple(_positive_int(item) for item in items)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ridgeline-bench",
        description="Measure prefill and decode times of a Llama-style model with random weights "
        "on one GPU (or the CPU) and write a Ridgeline run document.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", dest="model_id", help="catalog model id, e.g. llama-3-8b")
    source.add_argument("--config", dest="config_path", type=Path, help="a config.json file")
    parser.add_argument(
        "--service", dest="service_url", help="resolve --model from this Ridgeline service"
    )
    parser.add_argument(
        "--device",
        choices=[kind.value for kind in DeviceKind],
        help="default: cuda when PyTorch sees a GPU, else cpu",
    )
    parser.add_argument(
        "--dtype",
        choices=[dtype.value for dtype in BENCH_DTYPES],
        help="default: bf16 on cuda, fp32 on cpu (where bf16 matrix products are slow)",
    )
    parser.add_argument("--layers", type=_positive_int, help="run this many layers only")
    parser.add_argument(
        "--prompt-lens", type=_int_list, default=(512, 1024, 2048, 4096), help="prefill lengths"
    )
    parser.add_argument(
        "--prefill-batch",
        type=_positive_int,
        default=1,
        help="also measure prefill with this many prompts at once (batch 1 always runs)",
    )
    parser.add_argument(
        "--decode-batches", type=_int_list, default=(1, 8, 32), help="decode batch sizes"
    )
    parser.add_argument(
        "--kv-lens", type=_int_list, default=(512, 4096), help="decode context lengths"
    )
    parser.add_argument("--repeats", type=_positive_int, default=10, help="timed runs per point")
    parser.add_argument(
        "--warmup",
        type=_non_negative_int,
        default=2,
        help="untimed runs before them (at least 1 runs regardless: a first use is never timed)",
    )
    parser.add_argument(
        "--cuda-graphs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="on CUDA, time replays of each point captured as a CUDA graph, as serving engines "
        "run decode (default); --no-cuda-graphs times eager PyTorch, launch overhead included",
    )
    parser.add_argument("--out", type=Path, help="where to write the run document (JSON)")
    parser.add_argument("--upload", dest="upload_url", help="post the run to this service")
    parser.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"API key for --upload (default: ${API_KEY_ENV})",
    )
    parser.add_argument("--gpu", help="GPU catalog id to record (default: matched by name)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and inputs")
    parser.add_argument("--threads", type=_positive_int, help="CPU threads PyTorch may use")
    return parser


def parse_options(argv: Sequence[str] | None = None) -> BenchOptions:
    """Parse the command line; exits with status 2 and a usage message on bad arguments."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.upload_url and not args.api_key:
        parser.error(f"--upload needs --api-key (or ${API_KEY_ENV})")
    if args.service_url and args.config_path:
        parser.error("--service resolves --model; it does not apply to --config")
    return BenchOptions(
        model_id=args.model_id,
        config_path=args.config_path,
        service_url=args.service_url,
        device=None if args.device is None else DeviceKind(args.device),
        dtype=None if args.dtype is None else DType(args.dtype),
        layers=args.layers,
        prompt_lens=tuple(args.prompt_lens),
        prefill_batch=args.prefill_batch,
        decode_batches=tuple(args.decode_batches),
        kv_lens=tuple(args.kv_lens),
        repeats=args.repeats,
        warmup=args.warmup,
        out=args.out,
        upload_url=args.upload_url,
        api_key=args.api_key,
        gpu=args.gpu,
        seed=args.seed,
        threads=args.threads,
        cuda_graphs=args.cuda_graphs,
    )


@dataclass(frozen=True, slots=True)
class _ResolvedModel:
    spec: RunModelSpec
    notes: tuple[str, ...]  # how the spec that runs departs from the catalog's


def _resolve_model(options: BenchOptions, http_client: httpx.Client | None) -> _ResolvedModel:
    if options.config_path is not None:
        entry = model_from_config_file(options.config_path)
    elif options.service_url is not None and options.model_id is not None:
        entry = fetch_service_model(options.service_url, options.model_id, client=http_client)
    elif options.model_id is not None:
        entry = find_model(options.model_id, bundled_entries("models"))
    else:  # argparse requires one of --model and --config
        raise ModelResolutionError("--model or --config is required")
    spec = run_model_spec(entry, model_id=options.model_id, layers=options.layers)
    notes: list[str] = []
    catalog_layers = entry.get("num_layers")
    if options.layers is not None and catalog_layers != options.layers:
        notes.append(f"{options.layers} of the architecture's {catalog_layers} layers ran")
    longest = max((*options.prompt_lens, *options.kv_lens), default=0)
    if longest > spec.max_context_tokens:
        # The work per token does not depend on the limit: record the longest length that ran,
        # as a long-context (RoPE-scaled) variant of the architecture would have it.
        notes.append(
            f"max_context_tokens raised from {spec.max_context_tokens} to {longest} to cover "
            "the measured lengths (a long-context variant of the architecture)"
        )
        spec = spec.model_copy(update={"max_context_tokens": longest})
    return _ResolvedModel(spec=spec, notes=tuple(notes))


def write_document(document: RunDocument, path: Path) -> None:
    """Write `document` as indented JSON, atomically (a crash leaves the old file or none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(document.model_dump_json(indent=2) + "\n", encoding="utf-8")
    partial.replace(path)


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def run(
    options: BenchOptions,
    *,
    workload_factory: WorkloadFactory | None = None,
    http_client: httpx.Client | None = None,
    progress: bool | None = None,
) -> int:
    """Resolve the model, measure, write the document, upload it if asked; the exit status.

    `workload_factory` builds the measuring workload (default: PyTorch's); `http_client` serves
    --service and --upload (default: a fresh httpx client); `progress` as in `run_benchmark`.
    """
    try:
        resolved = _resolve_model(options, http_client)
    except ModelResolutionError as error:
        _say(f"ridgeline-bench: {error}")
        return EXIT_USAGE
    try:
        import tqdm  # noqa: F401, PLC0415 - the progress bar's: checked before any work

        from app.bench import device as torch_side  # noqa: PLC0415 - PyTorch only from here on
        from app.bench.environment import collect_environment  # noqa: PLC0415
    except ImportError as error:
        _say(f"ridgeline-bench: {MISSING_EXTRA} ({error})")
        return EXIT_USAGE
    if options.threads is not None:
        torch_side.set_cpu_threads(options.threads)
    if options.device is not None:
        device = options.device
    else:
        device = DeviceKind.CUDA if torch_side.cuda_available() else DeviceKind.CPU
    dtype = options.dtype or (DType.BF16 if device is DeviceKind.CUDA else DType.FP32)
    try:
        config = BenchConfig(
            model=resolved.spec,
            device=device,
            dtype=dtype,
            prompt_lens=options.prompt_lens,
            prefill_batches=tuple(sorted({1, options.prefill_batch})),
            decode_batches=options.decode_batches,
            kv_lens=options.kv_lens,
            repeats=options.repeats,
            warmup=options.warmup,
            seed=options.seed,
            matmul_size=DEFAULT_MATMUL_SIZE[device],
            copy_bytes=DEFAULT_COPY_BYTES[device],
            cuda_graphs=options.cuda_graphs,
        )
        if device is DeviceKind.CUDA and not torch_side.cuda_available():
            raise ValueError("device: --device cuda, but PyTorch sees no CUDA device")
    except ValueError as error:
        _say(f"ridgeline-bench: {error}")
        return EXIT_USAGE
    if workload_factory is None:
        from app.bench.workload import TorchWorkload  # noqa: PLC0415

        workload_factory = TorchWorkload
    workload = workload_factory(config)
    environment = collect_environment(device)
    gpu = options.gpu or match_gpu_alias(environment.device_name, bundled_entries("gpus"))
    outcome: BenchOutcome = run_benchmark(
        config,
        workload,
        environment=environment,
        gpu=gpu,
        notes=resolved.notes,
        progress=progress,
    )
    out = options.out or Path(f"ridgeline-bench-{resolved.spec.id or 'config'}-{device}.json")
    write_document(outcome.document, out)
    _say(format_summary(outcome.document))
    _say(f"wrote {out}")
    return _settle(outcome, out, options, http_client)


def _settle(
    outcome: BenchOutcome, out: Path, options: BenchOptions, http_client: httpx.Client | None
) -> int:
    """Say how the run ended, upload it when it is whole and asked for; the exit status."""
    if outcome.interrupted:
        _say("interrupted: the points not measured are marked so; nothing uploaded")
        return EXIT_INTERRUPTED
    if outcome.failure is not None:
        _say(
            f"ridgeline-bench: the run broke at {outcome.failure}; the points measured before "
            f"are kept in {out}, the rest marked not measured; nothing uploaded"
        )
        return EXIT_FAILED
    if options.upload_url is not None and options.api_key is not None:
        try:
            run_id = upload_run(
                outcome.document, options.upload_url, options.api_key, client=http_client
            )
        except UploadError as error:
            _say(f"ridgeline-bench: {error}; the run is kept in {out}")
            return EXIT_FAILED
        print(run_id)
    return EXIT_OK


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@contextmanager
def interrupt_on_termination() -> Iterator[None]:
    """While inside, SIGTERM and SIGINT raise `KeyboardInterrupt`, so a deadline (`timeout`
    sends SIGTERM) ends the run the way Ctrl-C does: the points measured so far are written.
    SIGINT too, since a shell that starts a job in the background makes it ignore SIGINT."""
    if not hasattr(signal, "SIGTERM"):  # pragma: no cover - every POSIX system has it
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for sig in previous:
            signal.signal(sig, _interrupt)
    except ValueError:  # not the main thread: signals stay as they are
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `ridgeline-bench` and `python -m app.bench`; returns the exit status.
    `--profile` first: the kernel-profile mode (`app.bench.profile`)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--profile"]:
        try:
            from app.bench.profile import main as profile_main  # noqa: PLC0415 - needs torch
        except ImportError:
            print(f"error: --profile {MISSING_EXTRA}", file=sys.stderr)
            return EXIT_USAGE
        return profile_main(args[1:])
    options = parse_options(argv)
    with interrupt_on_termination():
        return run(options)
