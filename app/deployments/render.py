"""A planned deployment rendered as a Kubernetes manifest or Helm values around an engine's
launch (each engine's policy renders its own command: `EnginePolicy.launch`, checked against its
published arguments). Pure: typed inputs in, text out, no I/O.
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from app.deployments.arguments import HelmChart
from app.engine.serving import HELM_ENGINES
from app.engine.serving.launch import (
    EngineArguments,
    EngineLaunch,
    PlannedReplica,
    ServedModel,
    Unsupported,
)

__all__ = [
    "OPTIONS_DIR",
    "helm_values",
    "kubernetes_manifest",
    "shell_script",
]

OPTIONS_DIR = "/etc/ridgeline"
"""Where the Kubernetes manifest mounts an engine's options file."""


def shell_script(launch: EngineLaunch) -> str:
    """The launch as a POSIX shell script: each file written by a here-document, then the
    command."""
    lines = ["#!/bin/sh", "set -e"]
    for name, content in launch.files.items():
        lines += [f"cat > {shlex.quote(name)} <<'EOF'", content.rstrip("\n"), "EOF"]
    lines.append(launch.command)
    return "\n".join(lines) + "\n"


def _name(model: ServedModel, engine: str) -> str:
    """A DNS-1123 label from the model and engine (`llama-3-8b-vllm`)."""
    raw = f"{model.name}-{engine}".lower()
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
    image: str,
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
        "image": image,
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
    *,
    repository: str,
    image_tag: str,
) -> tuple[str, Unsupported | None]:
    """Values for `chart` (the vLLM production stack): one modelSpec entry with the replica
    count, GPUs per replica and vllmConfig; flags without a key of their own go to extraArgs."""
    if launch.engine not in HELM_ENGINES:
        raise ValueError(f"{chart.chart} serves {', '.join(HELM_ENGINES)}, not {launch.engine}")
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
        "repository": repository,
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
