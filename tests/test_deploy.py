"""The Kubernetes manifests in deploy/kubernetes: valid against the API's own JSON schemas (the
ones `kubernetes-validate` ships, so no network is needed), strict about unknown fields, and
consistent with the service they run (probes, port, settings, user, the migration Job)."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from app.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy" / "kubernetes"
# The oldest release with the preStop `sleep` action on by default (beta in 1.30), and the
# newest the validator knows.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")


PLAN_WORKER = "Deployment/ridgeline-plan-worker"
"""The second Deployment: plan workers (`ridgeline worker`); `Deployment` is the API's."""


def _manifests() -> dict[str, dict[str, Any]]:
    """Each manifest by its kind, or `kind/name` beside the API's Deployment."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(DEPLOY.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            kind, name = document["kind"], document["metadata"]["name"]
            key = kind if name in {"ridgeline", "ridgeline-migrate"} else f"{kind}/{name}"
            assert key not in found, key
            found[key] = document
    return found


MANIFESTS = _manifests()


def _container(kind: str, name: str) -> dict[str, Any]:
    """The container `name` of the manifest `kind` (a key of MANIFESTS)."""
    spec = MANIFESTS[kind]["spec"]["template"]["spec"]
    containers = spec["containers"] + spec.get("initContainers", [])
    return next(c for c in containers if c["name"] == name)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("kind", sorted(MANIFESTS))
def test_manifest_is_valid_kubernetes(kind: str, version: str) -> None:
    kubernetes_validate.validate(MANIFESTS[kind], version, strict=True)


def test_the_validator_refuses_a_misspelt_field() -> None:
    """The check above can fail: a probe's `pathh` is refused."""
    broken = copy.deepcopy(MANIFESTS["Deployment"])
    probe = broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    probe["httpGet"]["pathh"] = probe["httpGet"].pop("path")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


def test_what_the_platform_needs_is_there() -> None:
    assert set(MANIFESTS) == {
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "Job",
        "PodDisruptionBudget",
        "Service",
        PLAN_WORKER,
    }
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    listed = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == listed


def test_probes_ask_readiness_and_liveness_on_the_served_port() -> None:
    api = _container("Deployment", "api")
    port = int(api["args"][api["args"].index("--port") + 1])
    assert api["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    assert api["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert api["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    # /readyz answers within about a second (its database ping times out at 0.8 s).
    assert api["readinessProbe"]["timeoutSeconds"] > Settings().readiness_timeout_s


def test_service_and_autoscaler_point_at_the_deployment() -> None:
    deployment = MANIFESTS["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    service = MANIFESTS["Service"]["spec"]
    assert service["selector"].items() <= labels.items()
    assert service["ports"][0]["targetPort"] == "http"
    assert MANIFESTS["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == labels
    hpa = MANIFESTS["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert hpa["metrics"][0]["resource"]["name"] == "cpu"
    # Utilization is measured against the request: without one the autoscaler cannot act.
    assert _container("Deployment", "api")["resources"]["requests"]["cpu"] == "1"
    assert hpa["minReplicas"] >= 2


def test_settings_are_ones_the_service_reads() -> None:
    data = MANIFESTS["ConfigMap"]["data"]
    fields = {f"RIDGELINE_{name.upper()}" for name in Settings.model_fields}
    assert set(data) <= fields, set(data) - fields
    values = {key.removeprefix("RIDGELINE_").lower(): value for key, value in data.items()}
    settings = Settings.model_validate(values | {"api_keys": "a-production-key-0123456789"})
    assert settings.environment == "production"
    api = _container("Deployment", "api")
    secrets = {e["name"] for e in api["env"]}
    assert secrets == {"RIDGELINE_DATABASE_URL", "RIDGELINE_API_KEYS"}
    # SIGTERM drains for graceful_shutdown_s after the preStop pause; the kubelet waits longer.
    pause = api["lifecycle"]["preStop"]["sleep"]["seconds"]
    grace = MANIFESTS["Deployment"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > pause + settings.graceful_shutdown_s


def test_the_migration_is_a_job_of_its_own_with_the_same_image() -> None:
    migrate = _container("Job", "migrate")
    load = _container("Job", "load-catalog")
    api = _container("Deployment", "api")
    assert migrate["args"] == ["migrate"]
    assert load["args"] == ["load-catalog"]
    assert migrate["image"] == load["image"] == api["image"]
    assert api["args"][0] == "serve"  # replicas never migrate
    assert MANIFESTS["Job"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_pods_run_as_the_image_user() -> None:
    uid = int(re.search(r"useradd .*--uid (\d+)", (ROOT / "Dockerfile").read_text()).group(1))  # type: ignore[union-attr]
    for kind in ("Deployment", "Job", PLAN_WORKER):
        security = MANIFESTS[kind]["spec"]["template"]["spec"]["securityContext"]
        assert security["runAsUser"] == uid
        assert security["runAsNonRoot"] is True


def test_plans_run_in_a_worker_deployment_of_their_own() -> None:
    """API pods plan nothing; `ridgeline worker` pods take the plans queue with the same image
    and database, and the HorizontalPodAutoscaler scales the API only."""
    worker = _container(PLAN_WORKER, "plan-worker")
    api = _container("Deployment", "api")
    assert worker["args"][0] == "worker"
    assert worker["image"] == api["image"]
    assert {e["name"] for e in worker["env"]} == {"RIDGELINE_DATABASE_URL"}
    settings = Settings.model_validate(
        {
            key.removeprefix("RIDGELINE_").lower(): value
            for key, value in MANIFESTS["ConfigMap"]["data"].items()
        }
        | {"api_keys": "a-production-key-0123456789"}
    )
    assert settings.plan_workers == 0
    concurrency = int(worker["args"][worker["args"].index("--concurrency") + 1])
    assert int(worker["resources"]["requests"]["cpu"]) >= concurrency  # a CPU per plan
    labels = MANIFESTS[PLAN_WORKER]["spec"]["template"]["metadata"]["labels"]
    assert not MANIFESTS["Service"]["spec"]["selector"].items() <= labels.items()
