"""The launch renderer on its own: each planned setting becomes the engine's own flag, from the
argument list read in the engine's source (`app/engine/serving/data/`), or is reported unsupported.

The argument lists are read here straight from the data files, not through the code under test,
so a flag the renderer invents fails whatever `EngineArguments.check` does."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from app.deployments.arguments import helm_chart
from app.deployments.render import OPTIONS_DIR, helm_values, kubernetes_manifest, shell_script
from app.engine.dtypes import DType
from app.engine.serving import LAUNCH_ENGINES, policy_of
from app.engine.serving.launch import (
    EngineArguments,
    EngineLaunch,
    PlannedReplica,
    ServedModel,
)


def engine_arguments(engine: str) -> EngineArguments:
    return policy_of(engine).arguments()


def launch(
    args: EngineArguments,
    model: ServedModel,
    replica: PlannedReplica,
    options_dir: str | None = None,
) -> EngineLaunch:
    """The launch the engine's own policy renders."""
    return policy_of(args.engine).launch(args, model, replica, options_dir)


DATA = Path(__file__).resolve().parents[2] / "app" / "engine" / "serving" / "data"
DENSE = ServedModel("meta-llama/Meta-Llama-3-8B", "llama-3-8b", DType.BF16, moe=False)
MOE = ServedModel("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b", DType.BF16, moe=True)
REPLICA = PlannedReplica(
    gpu="h100-sxm5-80gb",
    tp=1,
    pp=1,
    dp=1,
    ep=1,
    weight_dtype=DType.BF16,
    kv_dtype=DType.BF16,
    max_num_seqs=256,
    chunk_tokens=2048,
    replicas=2,
    gpu_memory_utilization=0.9,
    gpus_per_node=8,
)


def published(engine: str) -> tuple[set[str], dict[str, list[str]]]:
    document = json.loads((DATA / f"{engine}.json").read_text())
    return set(document["flags"]), document["choices"]


def flags_of(argv: tuple[str, ...]) -> list[str]:
    return [arg for arg in argv if arg.startswith("--")]


def value_of(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_every_argument_list_names_its_source() -> None:
    for engine in LAUNCH_ENGINES:
        document = json.loads((DATA / f"{engine}.json").read_text())
        assert document["source"]["url"].startswith("https://github.com/")
        assert document["source"]["title"] and document["source"]["note"]
        assert len(document["flags"]) == len(set(document["flags"]))


GRID = [
    replace(REPLICA, tp=tp, dp=dp, ep=ep, pp=pp, weight_dtype=w, kv_dtype=kv, chunk_tokens=chunk)
    for tp, dp, pp, (w, kv), chunk in itertools.product(
        (1, 2, 8),
        (1, 2, 4),
        (1, 2),
        ((DType.BF16, DType.BF16), (DType.FP8, DType.FP8), (DType.BF16, DType.FP8)),
        (None, 8192),
    )
    for ep in (1, tp * dp)
]


@pytest.mark.parametrize("engine", LAUNCH_ENGINES)
def test_every_rendered_flag_and_value_is_in_the_engines_published_list(engine: str) -> None:
    flags, choices = published(engine)
    args = engine_arguments(engine)
    for model, replica in itertools.product((DENSE, MOE), GRID):
        rendered = launch(args, model, replica)
        assert rendered.argv[: len(args.command)] == args.command
        for flag in flags_of(rendered.argv):
            assert flag in flags, (engine, flag, replica)
            if flag in choices:
                assert value_of(rendered.argv, flag) in choices[flag], (engine, flag)


def test_a_flag_outside_the_list_is_refused() -> None:
    args = engine_arguments("vllm")
    with pytest.raises(ValueError, match="--max-num-sequences"):
        args.check(("vllm", "serve", "m", "--max-num-sequences", "8"))
    with pytest.raises(ValueError, match="--kv-cache-dtype"):
        args.check(("vllm", "serve", "m", "--kv-cache-dtype", "int8"))


def test_vllm_dense_launch_is_pinned() -> None:
    rendered = launch(engine_arguments("vllm"), DENSE, REPLICA)
    assert rendered.argv == (
        "vllm", "serve", "meta-llama/Meta-Llama-3-8B",
        "--served-model-name", "llama-3-8b",
        "--tensor-parallel-size", "1",
        "--kv-cache-dtype", "auto",
        "--gpu-memory-utilization", "0.9",
        "--max-num-seqs", "256",
        "--enable-chunked-prefill",
        "--max-num-batched-tokens", "2048",
    )  # fmt: skip
    assert rendered.unsupported == ()
    assert rendered.command.startswith("vllm serve meta-llama/Meta-Llama-3-8B --served-model")


def test_moe_attention_data_parallelism_with_expert_parallelism() -> None:
    """tp 2 x dp 4, ep 8: vLLM keeps per-rank scheduler settings; SGLang counts all 8 GPUs in
    --tp-size and multiplies the per-rank settings by dp (its scheduler divides them)."""
    replica = replace(REPLICA, tp=2, dp=4, ep=8)
    vllm = launch(engine_arguments("vllm"), MOE, replica).argv
    assert value_of(vllm, "--tensor-parallel-size") == "2"
    assert value_of(vllm, "--data-parallel-size") == "4"
    assert "--enable-expert-parallel" in vllm
    assert value_of(vllm, "--max-num-seqs") == "256"
    assert value_of(vllm, "--max-num-batched-tokens") == "2048"

    sglang = launch(engine_arguments("sglang"), MOE, replica).argv
    assert value_of(sglang, "--tp-size") == "8"
    assert value_of(sglang, "--dp-size") == "4"
    assert "--enable-dp-attention" in sglang
    assert value_of(sglang, "--ep-size") == "8"
    assert value_of(sglang, "--max-running-requests") == str(256 * 4)
    assert value_of(sglang, "--chunked-prefill-size") == str(2048 * 4)

    trtllm = launch(engine_arguments("trtllm"), MOE, replica)
    assert [u.setting for u in trtllm.unsupported] == ["dp"]
    assert "--enable_attention_dp" not in trtllm.argv


def test_trtllm_attention_dp_at_tp_1_goes_to_its_options_file() -> None:
    replica = replace(REPLICA, tp=1, dp=8, ep=8, kv_dtype=DType.FP8)
    rendered = launch(engine_arguments("trtllm"), MOE, replica, OPTIONS_DIR)
    assert value_of(rendered.argv, "--tp_size") == "8"
    assert value_of(rendered.argv, "--ep_size") == "8"
    assert value_of(rendered.argv, "--extra_llm_api_options") == (
        f"{OPTIONS_DIR}/extra-llm-api-options.yaml"
    )
    options = yaml.safe_load(rendered.files["extra-llm-api-options.yaml"])
    assert options == {"enable_attention_dp": True, "kv_cache_config": {"dtype": "fp8"}}
    script = shell_script(rendered)
    assert "cat > extra-llm-api-options.yaml <<'EOF'" in script
    assert script.rstrip().endswith(rendered.command)


def test_formats_become_quantisation_and_kv_flags_or_are_reported() -> None:
    fp8 = replace(REPLICA, weight_dtype=DType.FP8, kv_dtype=DType.FP8)
    vllm = launch(engine_arguments("vllm"), DENSE, fp8)
    assert value_of(vllm.argv, "--quantization") == "fp8"
    assert value_of(vllm.argv, "--kv-cache-dtype") == "fp8"
    sglang = launch(engine_arguments("sglang"), DENSE, fp8)
    assert value_of(sglang.argv, "--quantization") == "fp8"
    assert value_of(sglang.argv, "--kv-cache-dtype") == "fp8_e4m3"
    # TensorRT-LLM loads pre-quantised checkpoints only: the weights are reported.
    trtllm = launch(engine_arguments("trtllm"), DENSE, fp8)
    assert [u.setting for u in trtllm.unsupported] == ["weight_dtype"]

    int4 = replace(REPLICA, weight_dtype=DType.INT4, kv_dtype=DType.INT8)
    for engine in LAUNCH_ENGINES:
        rendered = launch(engine_arguments(engine), DENSE, int4)
        assert sorted(u.setting for u in rendered.unsupported) == ["kv_dtype", "weight_dtype"]
        assert "--quantization" not in rendered.argv
    # An fp8 checkpoint served as it is needs no quantisation flag.
    fp8_model = replace(DENSE, checkpoint_dtype=DType.FP8)
    served = launch(engine_arguments("vllm"), fp8_model, fp8)
    assert "--quantization" not in served.argv and served.unsupported == ()


def test_kubernetes_manifest_runs_the_planned_replicas_with_their_gpus() -> None:
    replica = replace(REPLICA, tp=2, replicas=3)
    args = engine_arguments("vllm")
    rendered = launch(args, DENSE, replica, OPTIONS_DIR)
    text, problem = kubernetes_manifest(
        rendered,
        args,
        DENSE,
        replica,
        image="vllm/vllm-openai:v0.24.0",
        labels={"ridgeline.io/rank": "0"},
    )
    assert problem is None
    deployment, service = yaml.safe_load_all(text)
    assert deployment["kind"] == "Deployment" and service["kind"] == "Service"
    assert deployment["spec"]["replicas"] == 3
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "vllm/vllm-openai:v0.24.0"
    assert container["command"] == list(rendered.argv)
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 2}
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8000}]
    # A replica wider than a node is not one pod: reported.
    wide = replace(replica, tp=8, pp=2)
    _, problem = kubernetes_manifest(
        launch(args, DENSE, wide, OPTIONS_DIR),
        args,
        DENSE,
        wide,
        image="vllm/vllm-openai:latest",
        labels={},
    )
    assert problem is not None and problem.setting == "gpus_per_replica"


def test_helm_values_use_the_charts_keys_and_pass_the_rest_as_extra_args() -> None:
    replica = replace(REPLICA, tp=2, dp=2, ep=4, replicas=5)
    rendered = launch(engine_arguments("vllm"), MOE, replica)
    text, problem = helm_values(
        rendered, helm_chart(), MOE, replica, repository="vllm/vllm-openai", image_tag="v0.24.0"
    )
    assert problem is None
    spec = yaml.safe_load(text)["servingEngineSpec"]["modelSpec"][0]
    assert spec["replicaCount"] == 5 and spec["requestGPU"] == 4
    assert spec["modelURL"] == "Qwen/Qwen3-30B-A3B" and spec["tag"] == "v0.24.0"
    assert spec["vllmConfig"] == {
        "tensorParallelSize": 2,
        "gpuMemoryUtilization": 0.9,
        "maxNumSeqs": 256,
        "enableChunkedPrefill": True,
        "extraArgs": [
            "--data-parallel-size", "2",
            "--enable-expert-parallel",
            "--kv-cache-dtype", "auto",
            "--max-num-batched-tokens", "2048",
        ],
    }  # fmt: skip
