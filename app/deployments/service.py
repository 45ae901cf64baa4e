"""Render a stored plan's candidate for a serving engine, Kubernetes or Helm.

The plan is read through `app.plans.service` (a plan not done yet is a 409); the model's
checkpoint and format come from the catalog, the engine version from the profile the plan was
timed with (the same choice the planner made: the GPU's profile for the plan's `engine`). A plan
whose model or candidate GPU is no longer at the version it read (edited, or deleted and
created again: versions are never reused for an id) is a 409 too: it renders what it planned or
nothing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.catalog.profiles import choose_engine, profile_refs
from app.catalog.repository import CatalogRepository, GpuRepository, ModelRepository
from app.catalog.spec_cache import SpecCache
from app.deployments.arguments import helm_chart
from app.deployments.render import OPTIONS_DIR, helm_values, kubernetes_manifest
from app.deployments.schemas import (
    MANIFEST_TARGETS,
    ArgumentSource,
    DeploymentRead,
    PlannedLayout,
    UnsupportedSetting,
)
from app.engine.dtypes import DType
from app.engine.serving import HELM_ENGINES, LAUNCH_ENGINES, EnginePolicy, ServingEngine, policy_of
from app.engine.serving.launch import (
    EngineArguments,
    EngineLaunch,
    PlannedReplica,
    ServedModel,
    Unsupported,
)
from app.errors import Conflict, FieldProblem, InvalidInput, NotFound
from app.plans.schemas import CandidateRead, PlanRead
from app.plans.service import PlanNotDone, get_plan, plan_in_full
from app.targets.schemas import engine_query

__all__ = ["CandidateNotFound", "PlanNotReady", "render_deployment"]

_INLINE_CHECKPOINT = "<checkpoint>"


class PlanNotReady(Conflict):
    """A deployment of a plan that is not done yet."""

    def __init__(self, plan_id: str, status: str, progress: float) -> None:
        super().__init__(
            f"Plan {plan_id!r} is {status} ({progress:.0%} of its candidates done): its "
            "candidates can be rendered once it is done; poll GET /v1/plans/{id} until its "
            "status is done."
        )
        self.plan_id = plan_id


class CandidateNotFound(NotFound):
    def __init__(self, plan_id: str, rank: int, count: int) -> None:
        super().__init__(
            f"Plan {plan_id!r} has {count} candidates (ranks 0 to {count - 1}), none at rank "
            f"{rank}."
        )


class CatalogChanged(Conflict):
    """A deployment of a plan whose model or GPU is no longer the entry it was computed for."""

    def __init__(self, plan_id: str, kind: str, entry_id: str, planned: int, now: int | None):
        what = (
            "has been deleted"
            if now is None
            else f'is at version {now} (ETag "{now}"), no longer the entry it was computed for'
        )
        super().__init__(
            f"Plan {plan_id!r} was computed for {kind} {entry_id!r} at version {planned}, which "
            f"{what}: a deployment rendered now would launch something the plan never timed. "
            "Plan again (POST /v1/plans) to render it."
        )
        self.plan_id = plan_id


def _check_catalog(session: Session, plan: PlanRead, candidate: CandidateRead) -> None:
    """409 when the model or the candidate's GPU changed (or went) since the plan read them:
    versions are never reused for an id, so a version that differs is another entry."""
    used: list[tuple[str, str, CatalogRepository[Any]]] = [
        ("models", model_id, ModelRepository(session))
        for model_id in plan.catalog_versions.get("models", {})  # none for an inline model
    ]
    if candidate.gpu in plan.catalog_versions.get("gpus", {}):
        used.append(("gpus", candidate.gpu, GpuRepository(session)))
    for kind, entry_id, repository in used:
        planned = plan.catalog_versions[kind][entry_id]
        row = repository.get(entry_id)
        now = None if row is None else row.version
        if now != planned:
            raise CatalogChanged(plan.id, kind[:-1], entry_id, planned, now)


def _done_plan(session: Session, plan_id: str) -> PlanRead:
    try:
        return plan_in_full(session, plan_id)
    except PlanNotDone:
        row = get_plan(session, plan_id)
        raise PlanNotReady(plan_id, str(row.status), float(row.progress)) from None


def _path_problem(field: str, message: str) -> InvalidInput:
    return InvalidInput(f"{field}: {message}", (FieldProblem(field, message, "path"),))


def _candidate(plan: PlanRead, rank: int) -> CandidateRead:
    if rank >= len(plan.plans):
        raise CandidateNotFound(plan.id, rank, len(plan.plans))
    candidate = plan.plans[rank]
    if not candidate.feasible or candidate.replicas is None:
        reasons = "; ".join(candidate.reasons) or "it was not planned"
        raise _path_problem("rank", f"the candidate at rank {rank} is infeasible: {reasons}")
    return candidate


def _engine(target: str, engine: str | None, planned: ServingEngine) -> EnginePolicy:
    """The engine a target launches: the target's own, or for manifests the one asked for (the
    Helm chart's own by default), else the one the plan simulated (the roofline's plans launch as
    its `launched_as`)."""
    if target in LAUNCH_ENGINES:
        if engine is not None and engine != target:
            raise InvalidInput.at("engine", f"target {target} launches {target}")
        return policy_of(target)
    if target == "helm":
        if engine is not None and engine not in HELM_ENGINES:
            chart = helm_chart().chart
            raise InvalidInput.at("engine", f"the {chart} chart serves {', '.join(HELM_ENGINES)}")
        return policy_of(engine or HELM_ENGINES[0])
    if engine is not None:
        return policy_of(engine)
    return planned.launcher


def _served_model(
    session: Session, cache: SpecCache, plan: PlanRead, model_path: str | None
) -> tuple[ServedModel, list[Unsupported], list[str]]:
    requested = plan.request.get("model")
    unsupported: list[Unsupported] = []
    notes: list[str] = []
    if isinstance(requested, str):
        spec = cache.model(requested, "model").spec
        row = ModelRepository(session).get(spec.id)
        repo = row.hf_repo if row is not None else None
        path = model_path or repo or spec.id
        if model_path is None and repo is None:
            notes.append(f"the catalog names no Hugging Face repository for {spec.id}")
        name, checkpoint, moe = spec.id, spec.checkpoint_dtype, spec.moe is not None
    else:
        fields = requested if isinstance(requested, dict) else {}
        name = "inline"
        checkpoint = DType(fields.get("checkpoint_dtype") or DType.BF16.value)
        moe = fields.get("moe") is not None
        path = model_path or _INLINE_CHECKPOINT
        if model_path is None:
            unsupported.append(
                Unsupported(
                    "model",
                    "inline",
                    "an inline architecture names no checkpoint: give model_path",
                )
            )
    return ServedModel(path, name, checkpoint, moe), unsupported, notes


def _replica(plan: PlanRead, candidate: CandidateRead) -> PlannedReplica:
    replicas = candidate.replicas
    if replicas is None:  # _candidate refused it
        raise ValueError("an unplanned candidate has no replicas")
    return PlannedReplica(
        gpu=candidate.gpu,
        tp=candidate.tp,
        pp=candidate.pp,
        dp=candidate.dp,
        ep=candidate.ep,
        weight_dtype=DType(candidate.weight_dtype),
        kv_dtype=DType(candidate.kv_dtype),
        max_num_seqs=candidate.max_num_seqs,
        chunk_tokens=candidate.chunk_tokens,
        replicas=replicas,
        gpu_memory_utilization=float(plan.request.get("gpu_memory_utilization", 0.9)),
        gpus_per_node=int(plan.request.get("gpus_per_node", 8)),
    )


def _argument_source(args: EngineArguments) -> ArgumentSource:
    return ArgumentSource(
        engine=args.engine,
        version=args.version,
        title=args.source.title,
        url=args.source.url,
    )


def render_deployment(
    session: Session,
    cache: SpecCache,
    plan_id: str,
    rank: int,
    target: str,
    *,
    engine: str | None = None,
    model_path: str | None = None,
) -> DeploymentRead:
    """The candidate at `rank` of a done plan rendered for `target`. 404 for an unknown plan or
    rank; 409 while the plan is not done; 422 for an infeasible candidate or an `engine` the
    target cannot launch."""
    plan = _done_plan(session, plan_id)
    candidate = _candidate(plan, rank)
    _check_catalog(session, plan, candidate)
    plan_engine = plan.request.get("engine")
    planned = choose_engine(
        engine_query(plan_engine if isinstance(plan_engine, str) else None),
        profile_refs(session, candidate.gpu),
        gpu=candidate.gpu,
        relatives=cache.relatives_of(cache.gpu(candidate.gpu)),
    ).engine
    chosen = _engine(target, engine, planned)
    model, unsupported, notes = _served_model(session, cache, plan, model_path)
    replica = _replica(plan, candidate)

    name = chosen.name.value
    version = planned.version if planned.name is chosen.name else None
    if version is None:
        notes.append(
            f"the plan simulated {planned.policy.title}, not {name}: its latencies are "
            "that engine's; the image tag is latest"
        )
    args = chosen.arguments()
    if version is not None and version.split(".")[:2] != args.version.split(".")[:2]:
        notes.append(
            f"flags are checked against {name} {args.version}'s published arguments "
            f"(the newest read); the plan's profile is {name} {version}"
        )

    manifest = target in MANIFEST_TARGETS
    engine_launch: EngineLaunch = chosen.launch(
        args, model, replica, OPTIONS_DIR if manifest else None
    )
    files = dict(engine_launch.files)
    unsupported += engine_launch.unsupported
    notes += engine_launch.notes
    tag = chosen.image_tag(version)
    image = f"{chosen.image}:{tag}"
    if target == "kubernetes":
        labels = {"ridgeline.io/plan": plan.id, "ridgeline.io/rank": str(rank)}
        text, one_pod = kubernetes_manifest(
            engine_launch, args, model, replica, image=image, labels=labels
        )
        files = {"deployment.yaml": text}
        unsupported += [one_pod] if one_pod else []
    elif target == "helm":
        chart = helm_chart()
        text, one_pod = helm_values(
            engine_launch, chart, model, replica, repository=chosen.image or "", image_tag=tag
        )
        files = {"values.yaml": text}
        unsupported += [one_pod] if one_pod else []
        notes.append(f"values for the {chart.chart} chart ({chart.source.url})")

    return DeploymentRead(
        plan_id=plan.id,
        rank=rank,
        target=target,
        engine=name,
        engine_version=version,
        model=model.path,
        layout=PlannedLayout(
            gpu=replica.gpu,
            tp=replica.tp,
            pp=replica.pp,
            dp=replica.dp,
            ep=replica.ep,
            gpus_per_replica=replica.gpus_per_replica,
            weight_dtype=replica.weight_dtype.value,
            kv_dtype=replica.kv_dtype.value,
            max_num_seqs=replica.max_num_seqs,
            chunk_tokens=replica.chunk_tokens,
            replicas=replica.replicas,
            gpu_memory_utilization=replica.gpu_memory_utilization,
        ),
        argv=list(engine_launch.argv),
        command=engine_launch.command,
        files=files,
        unsupported=[
            UnsupportedSetting(setting=u.setting, value=u.value, reason=u.reason)
            for u in unsupported
        ],
        notes=notes,
        arguments=_argument_source(args),
    )
