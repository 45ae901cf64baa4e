"""`GET /v1/plans/{id}/deployments/{rank}` over HTTP: one stored plan rendered for every target,
pinned; a plan not done yet is a 409, an unknown rank a 404, an unknown target a 422.

The plan is the hand-checked one of `test_plans.py` (Llama-3-8B on the H100 SXM5, 10 requests/s
of 2,048-token prompts and 256-token outputs, tp 1, bf16, 2,048-token chunks, max_num_seqs 256),
timed with the GPU's default profile (vLLM 0.24.0): its candidate is rendered as it was planned.
"""

from __future__ import annotations

import time
from typing import Any

import yaml
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from app.web.heavy import HeavyWork
from tests.api.catalog_helpers import new_model
from tests.conftest import AUTH

CONSTANT_2K = {"p50": 2048, "p90": 2048, "p99": 2048}
CONSTANT_256 = {"p50": 256, "p90": 256, "p99": 256}
PLAN: dict[str, Any] = {
    "model": "llama-3-8b",
    "traffic": {"requests_per_s": 10, "prompt_tokens": CONSTANT_2K, "output_tokens": CONSTANT_256},
    "slo": {"ttft_p99_ms": 1000, "tpot_p99_ms": 50},
    "gpus": ["h100-sxm5-80gb"],
    "tp_candidates": [1],
    "weight_dtypes": ["bf16"],
    "max_num_seqs": [256],
    "chunk_tokens": [2048],
    "probe_requests": 1000,
}
VLLM = [
    "vllm", "serve", "meta-llama/Meta-Llama-3-8B",
    "--served-model-name", "llama-3-8b",
    "--tensor-parallel-size", "1",
    "--kv-cache-dtype", "auto",
    "--gpu-memory-utilization", "0.9",
    "--max-num-seqs", "256",
    "--enable-chunked-prefill",
    "--max-num-batched-tokens", "2048",
]  # fmt: skip
SGLANG = [
    "python", "-m", "sglang.launch_server",
    "--model-path", "meta-llama/Meta-Llama-3-8B",
    "--served-model-name", "llama-3-8b",
    "--host", "0.0.0.0",
    "--port", "30000",
    "--tp-size", "1",
    "--kv-cache-dtype", "auto",
    "--mem-fraction-static", "0.9",
    "--max-running-requests", "256",
    "--chunked-prefill-size", "2048",
]  # fmt: skip
TRTLLM = [
    "trtllm-serve", "meta-llama/Meta-Llama-3-8B",
    "--host", "0.0.0.0",
    "--port", "8000",
    "--backend", "pytorch",
    "--tp_size", "1",
    "--kv_cache_free_gpu_memory_fraction", "0.9",
    "--max_batch_size", "256",
    "--max_num_tokens", "2048",
    "--enable_chunked_prefill",
]  # fmt: skip


def done_plan(client: TestClient) -> dict[str, Any]:
    """The plan's full answer once done (a 202 is polled)."""
    response = client.post("/v1/plans", json=PLAN, headers=AUTH)
    assert response.status_code in (201, 202), response.text
    plan_id = response.json()["id"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        answer: dict[str, Any] = client.get(
            f"/v1/plans/{plan_id}", params={"detail": "full"}
        ).json()
        if answer.get("status", "done") == "done":
            return answer
        time.sleep(0.2)
    raise AssertionError(f"plan {plan_id} not done in 120 s")


def test_one_plan_rendered_for_every_target(client: TestClient) -> None:
    plan = done_plan(client)
    best = plan["plans"][0]
    assert best["feasible"] and (best["tp"], best["dp"], best["pp"]) == (1, 1, 1)
    base = f"/v1/plans/{plan['id']}/deployments/0"

    vllm = client.get(base, params={"target": "vllm"})
    assert vllm.status_code == 200, vllm.text
    answer = vllm.json()
    assert answer["argv"] == VLLM
    assert answer["command"] == " ".join(VLLM)
    assert (answer["engine"], answer["engine_version"]) == ("vllm", "0.24.0")
    assert answer["unsupported"] == [] and answer["files"] == {}
    assert answer["layout"]["replicas"] == best["replicas"]
    assert answer["arguments"]["url"].startswith("https://github.com/vllm-project/vllm/blob/")

    sglang = client.get(base, params={"target": "sglang"}).json()
    assert sglang["argv"] == SGLANG
    # The plan was timed with vLLM's profile: said, and no version is claimed for SGLang.
    assert sglang["engine_version"] is None
    assert any("the plan simulated vLLM, not sglang" in note for note in sglang["notes"])
    trtllm = client.get(base, params={"target": "trtllm"}).json()
    assert trtllm["argv"] == TRTLLM and trtllm["unsupported"] == []

    script = client.get(base, params={"target": "vllm"}, headers={"Accept": "text/plain"})
    assert script.headers["content-type"].startswith("text/plain")
    assert script.text.splitlines()[-1] == " ".join(VLLM)

    manifest = client.get(
        base, params={"target": "kubernetes"}, headers={"Accept": "application/yaml"}
    )
    assert manifest.headers["content-type"].startswith("application/yaml")
    deployment, _service = yaml.safe_load_all(manifest.text)
    assert deployment["spec"]["replicas"] == best["replicas"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == VLLM
    assert container["image"] == "vllm/vllm-openai:v0.24.0"
    assert container["resources"]["requests"] == {"nvidia.com/gpu": 1}
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"

    as_sglang = client.get(base, params={"target": "kubernetes", "engine": "sglang"}).json()
    pod = yaml.safe_load_all(as_sglang["files"]["deployment.yaml"])
    container = next(pod)["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == SGLANG
    assert container["ports"] == [{"name": "http", "containerPort": 30000}]

    helm = client.get(base, params={"target": "helm"}).json()
    values = yaml.safe_load(helm["files"]["values.yaml"])
    spec = values["servingEngineSpec"]["modelSpec"][0]
    assert spec["replicaCount"] == best["replicas"] and spec["requestGPU"] == 1
    assert spec["vllmConfig"]["maxNumSeqs"] == 256
    assert spec["vllmConfig"]["extraArgs"] == [
        "--kv-cache-dtype", "auto", "--max-num-batched-tokens", "2048"
    ]  # fmt: skip

    checkpoint = client.get(base, params={"target": "vllm", "model_path": "/models/llama"})
    assert checkpoint.json()["argv"][2] == "/models/llama"

    # Errors name what was wrong.
    missing = client.get(f"/v1/plans/{plan['id']}/deployments/{len(plan['plans'])}?target=vllm")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"
    assert client.get(base, params={"target": "docker"}).status_code == 422
    wrong = client.get(base, params={"target": "helm", "engine": "sglang"})
    assert wrong.status_code == 422 and wrong.json()["errors"][0]["field"] == "engine"
    unknown = client.get(f"/v1/plans/{'0' * 32}/deployments/0?target=vllm")
    assert unknown.status_code == 404


def test_a_plan_not_done_is_a_409(settings: Settings, heavy_work: HeavyWork) -> None:
    """With no plan worker in the process the plan stays queued: its render is refused."""
    idle = settings.model_copy(update={"plan_workers": 0, "plan_wait_s": 0.0})
    with TestClient(create_app(idle, heavy_work), raise_server_exceptions=False) as client:
        response = client.post("/v1/plans", json=PLAN, headers=AUTH)
        assert response.status_code == 202, response.text
        plan_id = response.json()["id"]
        render = client.get(f"/v1/plans/{plan_id}/deployments/0", params={"target": "vllm"})
        assert render.status_code == 409
        assert render.headers["content-type"] == "application/problem+json"
        assert "queued" in render.json()["detail"]
        assert "rendered once it is done" in render.json()["detail"]


def test_a_plan_whose_model_or_gpu_changed_is_not_rendered(client: TestClient) -> None:
    """A deployment launches what its plan timed: after the plan's model is edited, or deleted
    and created again under its id (which continues the version count), or the candidate's GPU
    is edited, rendering is a 409 naming the entry and both versions, never a command for a
    model the plan was not computed for."""
    plan = done_plan(client)
    base = f"/v1/plans/{plan['id']}/deployments/0"
    assert client.get(base, params={"target": "vllm"}).status_code == 200
    planned = plan["catalog_versions"]["models"]["llama-3-8b"]

    fields = client.get("/v1/models/llama-3-8b").json()
    patched = client.patch(
        "/v1/models/llama-3-8b", json={"hf_repo": "someone/another-model"}, headers=AUTH
    )
    assert patched.status_code == 200, patched.text
    changed = client.get(base, params={"target": "vllm"})
    assert changed.status_code == 409, changed.text
    detail = changed.json()["detail"]
    assert f"model 'llama-3-8b' at version {planned}" in detail
    assert f"version {planned + 1}" in detail and "Plan again" in detail

    assert client.delete("/v1/models/llama-3-8b", headers=AUTH).status_code == 204
    gone = client.get(base, params={"target": "kubernetes"})
    assert gone.status_code == 409 and "has been deleted" in gone.json()["detail"]
    writable = {k: v for k, v in fields.items() if k in new_model()}
    recreated = client.post(
        "/v1/models",
        json=writable | {"id": "llama-3-8b", "hf_repo": "someone/another-model"},
        headers=AUTH,
    )
    assert recreated.status_code == 201, recreated.text
    assert recreated.headers["etag"] == f'"{planned + 2}"'
    again = client.get(base, params={"target": "vllm"})
    assert again.status_code == 409
    assert "someone/another-model" not in again.text

    # The GPU too: a fresh plan renders, and an edit of its GPU stops it.
    fresh = done_plan(client)
    fresh_base = f"/v1/plans/{fresh['id']}/deployments/0"
    assert client.get(fresh_base, params={"target": "vllm"}).status_code == 200
    gpu = client.patch(
        "/v1/gpus/h100-sxm5-80gb", json={"price_per_gpu_hour_usd": 9.99}, headers=AUTH
    )
    assert gpu.status_code == 200, gpu.text
    stale = client.get(fresh_base, params={"target": "vllm"})
    assert stale.status_code == 409 and "gpu 'h100-sxm5-80gb'" in stale.json()["detail"]
