"""The Helm chart a planned deployment's values are rendered for, as package data with its
source (`data/helm.json`): the keys a values file may use. Each engine's own launch arguments
are its policy's (`app.engine.serving.launch`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from app.engine.serving.launch import Source, source_of

__all__ = ["HelmChart", "helm_chart"]


@dataclass(frozen=True, slots=True)
class HelmChart:
    """The values shape of a serving chart: the keys a rendered values file may use."""

    chart: str
    source: Source
    model_spec_keys: frozenset[str]
    vllm_config_keys: frozenset[str]


@cache
def helm_chart() -> HelmChart:
    text = resources.files("app.deployments").joinpath("data").joinpath("helm.json").read_text()
    document: dict[str, Any] = json.loads(text)
    return HelmChart(
        chart=document["chart"],
        source=source_of(document["source"]),
        model_spec_keys=frozenset(document["model_spec_keys"]),
        vllm_config_keys=frozenset(document["vllm_config_keys"]),
    )
