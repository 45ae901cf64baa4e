"""A planned deployment rendered for a serving engine: its launch command, options file,
Kubernetes manifest or Helm values. Pure: typed inputs in, text out, no I/O.

Every setting of the plan either becomes the engine's own flag (from `app.deployments.arguments`,
checked before it is returned) or is reported in `unsupported` with the reason; none is dropped.

Layouts map as each engine counts GPUs (tp x dp x pp GPUs per replica, Ridgeline's `dp` being
attention data-parallel ranks of `tp` GPUs each, `ep` 1 or tp x dp):
- vLLM: `--tensor-parallel-size tp --data-parallel-size dp --pipeline-parallel-size pp`, and
  `--enable-expert-parallel` for ep = tp x dp (vLLM's expert-parallel group is the tp x dp GPUs).
  `--max-num-seqs` and `--max-num-batched-tokens` are per data-parallel engine, as in the plan.
- SGLang: with attention data parallelism (`--enable-dp-attention`, MoE models) `--tp-size`
  counts all tp x dp GPUs and the scheduler divides `--max-running-requests` and
  `--chunked-prefill-size` among the `--dp-size` ranks, so both are rendered times dp.
- TensorRT-LLM: attention data parallelism (`enable_attention_dp`) runs attention at tp 1 on
  each of `--tp_size` ranks; a plan with dp > 1 and tp > 1 cannot be expressed.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

import yaml

from app.deployments.arguments import Engine, EngineArguments, HelmChart
from app.engine.dtypes import DType

__all__ = [
    "EngineLaunch",
    "PlannedReplica",
    "ServedModel",
    "Unsupported",
    "helm_values",
    "kubernetes_manifest",
    "launch",
    "shell_script",
]

_SIXTEEN_BIT = (DType.BF16, DType.FP16)
_VLLM_DTYPE = {DType.BF16: "bfloat16", DType.FP16: "float16"}
OPTIONS_DIR = "/etc/ridgeline"
"""Where the Kubernetes manifest mounts an engine's options file."""


@dataclass(frozen=True, slots=True)
class ServedModel:
    """The model as the engine loads it."""

    path: str
    """Hugging Face repository or local checkpoint path."""
    name: str
    """The name clients ask for (the catalog id)."""
    checkpoint_dtype: DType
    moe: bool


@dataclass(frozen=True, slots=True)
class PlannedReplica:
    """One planned candidate: a replica's layout, formats and scheduler, and how many."""

    gpu: str
    tp: int
    pp: int
    dp: int
    ep: int
    weight_dtype: DType
    kv_dtype: DType
    max_num_seqs: int | None
    """Per data-parallel rank; None: the engine's default."""
    chunk_tokens: int | None
    """Prefill chunk (tokens per step) per data-parallel rank; None: the engine's default."""
    replicas: int
    gpu_memory_utilization: float
    gpus_per_node: int

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.dp * self.pp


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A planned setting the target cannot express, and why."""

    setting: str
    value: str
    reason: str


@dataclass(frozen=True, slots=True)
class EngineLaunch:
    """An engine's launch: its command line, the files it reads, what it cannot express."""

    engine: Engine
    argv: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)
    unsupported: tuple[Unsupported, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


class _Builder:
    """Collects flags, options, unsupported settings and notes for one engine."""

    def __init__(self, args: EngineArguments) -> None:
        self.args = args
        self.argv: list[str] = list(args.command)
        self.options: dict[str, Any] = {}
        self.unsupported: list[Unsupported] = []
        self.notes: list[str] = []

    def flag(self, name: str, value: object = None) -> None:
        self.argv.append(name)
        if value is not None:
            self.argv.append(str(value))

    def cannot(self, setting: str, value: object, reason: str) -> None:
        self.unsupported.append(Unsupported(setting, str(value), reason))

    def done(self, options_dir: str | None) -> EngineLaunch:
        files: dict[str, str] = {}
        spec = self.args.options_file
        if self.options and spec is not None:
            self.args.check_options(self.options)
            files[spec.name] = yaml.safe_dump(self.options, sort_keys=False)
            path = spec.name if options_dir is None else f"{options_dir}/{spec.name}"
            self.flag(spec.flag, path)
        argv = tuple(self.argv)
        self.args.check(argv)
        return EngineLaunch(
            self.args.engine, argv, files, tuple(self.unsupported), tuple(self.notes)
        )


def _activation_dtype(model: ServedModel) -> DType:
    """The format a 16-bit engine computes in: the checkpoint's when 16-bit, else bf16 (what
    quantised checkpoints declare as their `torch_dtype`)."""
    return model.checkpoint_dtype if model.checkpoint_dtype in _SIXTEEN_BIT else DType.BF16


def _quantisation(b: _Builder, model: ServedModel, replica: PlannedReplica, flag: str) -> None:
    """Weights in another format than the checkpoint's: online FP8 where the engine has it."""
    weights, checkpoint = replica.weight_dtype, model.checkpoint_dtype
    if weights is checkpoint:
        return
    online = b.args.choices.get(flag, ())
    if weights is DType.FP8 and checkpoint in _SIXTEEN_BIT and "fp8" in online:
        b.flag(flag, "fp8")
        b.notes.append(
            f"{flag} fp8 quantises the {checkpoint.value} checkpoint as it loads: a change in "
            "output quality to measure before serving"
        )
        return
    b.cannot(
        "weight_dtype",
        weights.value,
        f"{b.args.engine.value} cannot turn a {checkpoint.value} checkpoint into "
        f"{weights.value} weights as it loads: serve a checkpoint already quantised to "
        f"{weights.value} (give its path as model_path)",
    )


def _kv_value(
    b: _Builder, model: ServedModel, replica: PlannedReplica, allowed: tuple[str, ...]
) -> str | None:
    """The engine's name for the planned KV-cache format among `allowed` (None: reported
    unsupported)."""
    kv = replica.kv_dtype
    if kv is _activation_dtype(model) and "auto" in allowed:
        return "auto"
    by_engine = {
        Engine.VLLM: {DType.FP8: "fp8"},
        Engine.SGLANG: {DType.FP8: "fp8_e4m3", DType.BF16: "bf16"},
        Engine.TRTLLM: {DType.FP8: "fp8"},
    }[b.args.engine]
    value = by_engine.get(kv)
    if value is not None and value in allowed:
        return value
    b.cannot(
        "kv_dtype",
        kv.value,
        f"{b.args.engine.value}'s KV-cache formats are {', '.join(allowed)} ('auto' is the "
        f"model's {_activation_dtype(model).value}): none stores {kv.value}",
    )
    return None


def _spans_nodes(b: _Builder, replica: PlannedReplica) -> None:
    if replica.gpus_per_replica > replica.gpus_per_node:
        nodes = -(-replica.gpus_per_replica // replica.gpus_per_node)
        b.notes.append(
            f"one replica spans {nodes} nodes ({replica.gpus_per_replica} GPUs, "
            f"{replica.gpus_per_node} per node): start it with the engine's multi-node launch "
            "(one process group per node)"
        )


def _vllm(
    args: EngineArguments, model: ServedModel, replica: PlannedReplica, _options_dir: str | None
) -> EngineLaunch:
    b = _Builder(args)
    b.argv.append(model.path)
    b.flag("--served-model-name", model.name)
    b.flag("--tensor-parallel-size", replica.tp)
    if replica.pp > 1:
        b.flag("--pipeline-parallel-size", replica.pp)
    if replica.dp > 1:
        b.flag("--data-parallel-size", replica.dp)
    if replica.ep > 1:
        if model.moe and replica.ep == replica.tp * replica.dp:
            b.flag("--enable-expert-parallel")
        else:
            b.cannot(
                "ep",
                replica.ep,
                "vLLM's expert parallelism spans all tp x dp GPUs "
                f"({replica.tp * replica.dp}) of an MoE model",
            )
    _quantisation(b, model, replica, "--quantization")
    kv = _kv_value(b, model, replica, args.choices["--kv-cache-dtype"])
    if kv is not None:
        b.flag("--kv-cache-dtype", kv)
    b.flag("--gpu-memory-utilization", replica.gpu_memory_utilization)
    if replica.max_num_seqs is not None:
        b.flag("--max-num-seqs", replica.max_num_seqs)
    else:
        b.notes.append("max_num_seqs: any; vLLM's default applies")
    if replica.chunk_tokens is not None:
        b.flag("--enable-chunked-prefill")
        b.flag("--max-num-batched-tokens", replica.chunk_tokens)
    else:
        b.notes.append("chunk_tokens: any; vLLM's default max_num_batched_tokens applies")
    _spans_nodes(b, replica)
    return b.done(None)


def _sglang(
    args: EngineArguments, model: ServedModel, replica: PlannedReplica, _options_dir: str | None
) -> EngineLaunch:
    b = _Builder(args)
    b.flag("--model-path", model.path)
    b.flag("--served-model-name", model.name)
    b.flag("--host", "0.0.0.0")
    b.flag("--port", args.port)
    dp_attention = replica.dp > 1 and model.moe
    # Under --enable-dp-attention the scheduler splits these among the dp ranks.
    per_server = replica.dp if dp_attention else 1
    b.flag("--tp-size", replica.tp * per_server)
    if replica.pp > 1:
        b.flag("--pp-size", replica.pp)
    if replica.dp > 1:
        b.flag("--dp-size", replica.dp)
        if dp_attention:
            b.flag("--enable-dp-attention")
        else:
            b.notes.append(
                f"--dp-size {replica.dp} on a dense model runs {replica.dp} engines of tp "
                f"{replica.tp} behind SGLang's router, each with the scheduler settings below"
            )
    if replica.ep > 1:
        b.flag("--ep-size", replica.ep)
    _quantisation(b, model, replica, "--quantization")
    kv = _kv_value(b, model, replica, args.choices["--kv-cache-dtype"])
    if kv is not None:
        b.flag("--kv-cache-dtype", kv)
    b.flag("--mem-fraction-static", replica.gpu_memory_utilization)
    b.notes.append(
        "--mem-fraction-static is the share of GPU memory for weights and the KV pool, as "
        "gpu_memory_utilization is in the plan"
    )
    if replica.max_num_seqs is not None:
        b.flag("--max-running-requests", replica.max_num_seqs * per_server)
    else:
        b.notes.append("max_num_seqs: any; SGLang's default max_running_requests applies")
    if replica.chunk_tokens is not None:
        b.flag("--chunked-prefill-size", replica.chunk_tokens * per_server)
    else:
        b.notes.append("chunk_tokens: any; SGLang's default chunked_prefill_size applies")
    _spans_nodes(b, replica)
    return b.done(None)


def _trtllm(
    args: EngineArguments, model: ServedModel, replica: PlannedReplica, options_dir: str | None
) -> EngineLaunch:
    b = _Builder(args)
    b.argv.append(model.path)
    b.flag("--host", "0.0.0.0")
    b.flag("--port", args.port)
    b.flag("--backend", "pytorch")
    ranks = replica.tp
    if replica.dp > 1:
        if replica.tp == 1:
            ranks = replica.dp
            b.options["enable_attention_dp"] = True
        else:
            b.cannot(
                "dp",
                replica.dp,
                "TensorRT-LLM's attention data parallelism runs attention at tp 1 on every "
                f"rank: tp {replica.tp} x dp {replica.dp} has no equivalent",
            )
    b.flag("--tp_size", ranks)
    if replica.pp > 1:
        b.flag("--pp_size", replica.pp)
    if replica.ep > 1:
        b.flag("--ep_size", replica.ep)
    _quantisation(b, model, replica, "--quantization")  # no such flag: always reported
    options = args.options_file
    allowed = options.choices["kv_cache_config.dtype"] if options is not None else ()
    kv = _kv_value(b, model, replica, allowed)
    if kv is not None and kv != "auto":
        b.options["kv_cache_config"] = {"dtype": kv}
    b.flag("--kv_cache_free_gpu_memory_fraction", replica.gpu_memory_utilization)
    b.notes.append(
        "--kv_cache_free_gpu_memory_fraction is a share of the memory left after the weights, "
        "not of the whole GPU as the plan's gpu_memory_utilization: the same number gives "
        "TensorRT-LLM a larger KV cache; lower it to match the plan's"
    )
    if replica.max_num_seqs is not None:
        b.flag("--max_batch_size", replica.max_num_seqs)
    else:
        b.notes.append("max_num_seqs: any; TensorRT-LLM's default max_batch_size applies")
    if replica.chunk_tokens is not None:
        b.flag("--max_num_tokens", replica.chunk_tokens)
        b.flag("--enable_chunked_prefill")
    else:
        b.notes.append("chunk_tokens: any; TensorRT-LLM's default max_num_tokens applies")
    _spans_nodes(b, replica)
    return b.done(options_dir)


_ENGINES = {Engine.VLLM: _vllm, Engine.SGLANG: _sglang, Engine.TRTLLM: _trtllm}


def launch(
    args: EngineArguments,
    model: ServedModel,
    replica: PlannedReplica,
    options_dir: str | None = None,
) -> EngineLaunch:
    """The launch of one replica with `args`' engine; `options_dir`: where the command finds
    its options file (None: the working directory)."""
    return _ENGINES[args.engine](args, model, replica, options_dir)


def shell_script(launch: EngineLaunch) -> str:
    """The launch as a POSIX shell script: each file written by a here-document, then the
    command."""
    lines = ["#!/bin/sh", "set -e"]
    for name, content in launch.files.items():
        lines += [f"cat > {shlex.quote(name)} <<'EOF'", content.rstrip("\n"), "EOF"]
    lines.append(launch.command)
    return "\n".join(lines) + "\n"


def _name(model: ServedModel, engine: Engine) -> str:
    """A DNS-1123 label from the model and engine (`llama-3-8b-vllm`)."""
    raw = f"{model.name}-{engine.value}".lower()
    cleaned = "".join(c if c.isalnum() else "-" for c in raw).strip("-")
    while "--" in cleaned:
        cleaned = cleaned.replace("--", "-")
    return cleaned[:63].rstrip("-") or "ridgeline"


def _one_pod(replica: PlannedReplica, target: str) -> Unsupported | None:
    if replica.gpus_per_replica <= replica.gpus_per_node:
        return None
    return Unsupported(
        "gpus_per_replica",
        str(replica.gpus_per_replica),
        f"{target} runs a replica as one pod on one node of {replica.gpus_per_node} GPUs: a "
        "replica across nodes needs a multi-node workload (LeaderWorkerSet, or the engine's "
        "Ray cluster)",
    )


def kubernetes_manifest(
    launch: EngineLaunch,
    args: EngineArguments,
    model: ServedModel,
    replica: PlannedReplica,
    *,
    image_tag: str,
    labels: dict[str, str],
) -> tuple[str, Unsupported | None]:
    """A Deployment (replicas, the engine container with `nvidia.com/gpu` per replica, readiness
    on the engine's health route), its Service, and a ConfigMap holding the options file; and
    what a single-pod replica cannot express. `launch` must be rendered with `OPTIONS_DIR`."""
    name = _name(model, launch.engine)
    selector = {"app.kubernetes.io/name": name}
    gpus = replica.gpus_per_replica

    def probe(period_s: int, failures: int) -> dict[str, Any]:
        route = {"path": args.health_path, "port": "http"}
        return {"httpGet": route, "periodSeconds": period_s, "failureThreshold": failures}

    container: dict[str, Any] = {
        "name": "engine",
        "image": f"{args.image}:{image_tag}",
        "command": list(launch.argv),
        "ports": [{"name": "http", "containerPort": args.port}],
        "resources": {
            "requests": {"nvidia.com/gpu": gpus},
            "limits": {"nvidia.com/gpu": gpus},
        },
        # Loading weights and capturing graphs take minutes: the startup probe allows 30.
        "startupProbe": probe(10, 180),
        "readinessProbe": probe(5, 3),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    documents: list[dict[str, Any]] = []
    if launch.files:
        documents.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{name}-options", "labels": selector | labels},
                "data": dict(launch.files),
            }
        )
        container["volumeMounts"].append({"name": "options", "mountPath": OPTIONS_DIR})
        volumes.append({"name": "options", "configMap": {"name": f"{name}-options"}})
    documents.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": name,
                "labels": selector | labels,
                "annotations": {"ridgeline.io/gpu": replica.gpu},
            },
            "spec": {
                "replicas": replica.replicas,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": selector | labels},
                    "spec": {"containers": [container], "volumes": volumes},
                },
            },
        }
    )
    documents.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "labels": selector | labels},
            "spec": {
                "selector": selector,
                "ports": [{"name": "http", "port": args.port, "targetPort": "http"}],
            },
        }
    )
    text = yaml.safe_dump_all(documents, sort_keys=False)
    return text, _one_pod(replica, "A Deployment")


# Flags the chart renders from its own vllmConfig keys (and the model from modelURL).
_CHART_FLAGS = {
    "--tensor-parallel-size": "tensorParallelSize",
    "--max-num-seqs": "maxNumSeqs",
    "--gpu-memory-utilization": "gpuMemoryUtilization",
}


def helm_values(
    launch: EngineLaunch,
    chart: HelmChart,
    model: ServedModel,
    replica: PlannedReplica,
    image_tag: str,
) -> tuple[str, Unsupported | None]:
    """Values for `chart` (the vLLM production stack): one modelSpec entry with the replica
    count, GPUs per replica and vllmConfig; flags without a key of their own go to extraArgs."""
    if launch.engine is not Engine.VLLM:
        raise ValueError(f"{chart.chart} serves vLLM, not {launch.engine.value}")
    config: dict[str, Any] = {}
    extra: list[str] = []
    rest = list(launch.argv[3:])  # vllm serve <model>
    index = 0
    while index < len(rest):
        arg = rest[index]
        takes_value = index + 1 < len(rest) and not rest[index + 1].startswith("--")
        value = rest[index + 1] if takes_value else None
        index += 2 if takes_value else 1
        if arg == "--served-model-name":
            continue  # the chart serves the model under modelSpec.name
        if arg in _CHART_FLAGS and value is not None:
            key = _CHART_FLAGS[arg]
            config[key] = float(value) if "." in value else int(value)
        elif arg == "--enable-chunked-prefill":
            config["enableChunkedPrefill"] = True
        else:
            extra += [arg] if value is None else [arg, value]
    if extra:
        config["extraArgs"] = extra
    spec: dict[str, Any] = {
        "name": model.name,
        "repository": "vllm/vllm-openai",
        "tag": image_tag,
        "modelURL": model.path,
        "replicaCount": replica.replicas,
        "requestGPU": replica.gpus_per_replica,
        "vllmConfig": config,
    }
    unknown = (set(spec) - chart.model_spec_keys) | (set(config) - chart.vllm_config_keys)
    if unknown:
        raise ValueError(f"{chart.chart} values have no keys {sorted(unknown)}")
    text = yaml.safe_dump({"servingEngineSpec": {"modelSpec": [spec]}}, sort_keys=False)
    return text, _one_pod(replica, "The chart")
