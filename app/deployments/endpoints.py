"""`/v1/plans/{id}/deployments/{rank}`: a stored plan's candidate as a launch command, a
Kubernetes manifest or Helm values (JSON; `text/plain` or `application/yaml` on request)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request, Response

from app.deployments import service as deployments
from app.deployments.render import shell_script
from app.deployments.schemas import (
    MANIFEST_TARGETS,
    TARGETS,
    DeploymentRead,
    one_of,
)
from app.engine.serving import LAUNCH_ENGINES
from app.engine.serving.launch import EngineLaunch
from app.web.deps import SpecCacheDep, read_in_session
from app.web.negotiation import JSON, TEXT, YAML, preferred
from app.web.schemas import problem_responses

router = APIRouter(prefix="/v1", tags=["deployments"])


def _text(answer: DeploymentRead) -> str:
    """The rendering as one text: the manifest or values, or a shell script of the launch."""
    if answer.target in MANIFEST_TARGETS:
        return next(iter(answer.files.values()))
    launch = EngineLaunch(answer.engine, tuple(answer.argv), dict(answer.files))
    return shell_script(launch)


@router.get(
    "/plans/{plan_id}/deployments/{rank}",
    response_model=DeploymentRead,
    summary="Render a planned candidate: engine launch arguments, a Kubernetes manifest or Helm "
    "values",
    description=(
        "The candidate at `rank` of a done plan (0: the cheapest feasible) as `vllm serve` "
        "arguments, `python -m sglang.launch_server` arguments, `trtllm-serve` with its "
        "options file, a Kubernetes Deployment (the engine container, `nvidia.com/gpu` per "
        "replica, the planned replica count, readiness on the engine's health route) and "
        "Service, or values for the vLLM production-stack Helm chart. Every flag is the "
        "engine's own name, from its published argument list (`arguments`); a planned "
        "setting the target cannot express is listed in `unsupported` with the reason. "
        "`Accept: text/plain` answers a shell script (engines) or the YAML (manifests); "
        "`application/yaml` the manifest or values. 409 while the plan is not done."
    ),
    responses=problem_responses(404, 409, 422)
    | {200: {"content": {TEXT: {"schema": {"type": "string"}}, YAML: {}}}},
)
async def get_deployment_route(
    plan_id: Annotated[str, Path(pattern=r"^[0-9a-f]{32}$", description="Plan id.")],
    rank: Annotated[
        int, Path(ge=0, le=10_000, description="Candidate rank (0: cheapest).", examples=[0])
    ],
    target: Annotated[
        str, Query(description="What to render.", examples=["vllm"], **one_of(TARGETS))
    ],
    request: Request,
    cache: SpecCacheDep,
    engine: Annotated[
        str | None,
        Query(
            description="The engine a manifest launches (`kubernetes`; `helm` is vLLM's "
            "chart); default: the plan's engine, else vLLM.",
            **one_of(LAUNCH_ENGINES),
        ),
    ] = None,
    model_path: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=512,
            pattern=r"^[^\x00\s]+$",
            description="The checkpoint to load instead of the catalog's Hugging Face "
            "repository (a pre-quantised checkpoint, a local path).",
        ),
    ] = None,
    accept: Annotated[
        str | None,
        Header(description="`text/plain` or `application/yaml` for the rendering alone."),
    ] = None,
) -> Response:
    answer = await read_in_session(
        request,
        lambda session: deployments.render_deployment(
            session, cache, plan_id, rank, target, engine=engine, model_path=model_path
        ),
    )
    manifest = target in MANIFEST_TARGETS
    offered = (JSON, TEXT, YAML) if manifest else (JSON, TEXT)
    media = preferred(accept, offered)
    if media == JSON:
        return Response(answer.model_dump_json(), media_type=JSON)
    return Response(_text(answer), media_type=media if media == YAML else f"{TEXT}; charset=utf-8")
