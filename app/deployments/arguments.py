"""Each serving engine's published command-line arguments, as package data with their source.

`data/<engine>.json` lists the flags of one engine release line, read in the engine's own source
(the file and commit are in `source`), and the values some of them accept. A rendered launch
command uses only these names, and `check` refuses any other: a misspelt or invented flag is a
bug here, never a command an operator finds broken at launch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any

__all__ = [
    "Engine",
    "EngineArguments",
    "HelmChart",
    "OptionsFile",
    "Source",
    "engine_arguments",
    "helm_chart",
]


class Engine(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"


@dataclass(frozen=True, slots=True)
class Source:
    title: str
    url: str
    note: str


@dataclass(frozen=True, slots=True)
class OptionsFile:
    """A YAML file of further settings the command names (TensorRT-LLM's LLM API options)."""

    flag: str
    name: str
    keys: dict[str, tuple[str, ...]]
    """Top-level keys, each with the keys it may hold when it is a mapping."""
    choices: dict[str, tuple[str, ...]]
    """Allowed values by dotted key."""


@dataclass(frozen=True, slots=True)
class EngineArguments:
    """One engine's launch command and the arguments it accepts."""

    engine: Engine
    version: str
    """The release line the list was read from."""
    command: tuple[str, ...]
    positional: tuple[str, ...]
    source: Source
    health_path: str
    port: int
    """The port the rendered command serves on."""
    image: str
    """The engine's published container image (without tag)."""
    flags: frozenset[str]
    choices: dict[str, tuple[str, ...]]
    options_file: OptionsFile | None

    def check(self, argv: tuple[str, ...]) -> None:
        """ValueError naming the first argument of `argv` (after the command) that is not one of
        the engine's flags, or a value outside a flag's published choices."""
        rest = argv[len(self.command) :]
        for index, arg in enumerate(rest):
            if not arg.startswith("--"):
                continue
            if arg not in self.flags:
                raise ValueError(f"{self.engine} has no flag {arg!r}")
            allowed = self.choices.get(arg)
            if allowed is not None and (index + 1 >= len(rest) or rest[index + 1] not in allowed):
                shown = rest[index + 1] if index + 1 < len(rest) else None
                raise ValueError(f"{self.engine} {arg} takes one of {allowed}, not {shown!r}")

    def check_options(self, options: dict[str, Any]) -> None:
        """ValueError naming the first key of an options file the engine does not read."""
        spec = self.options_file
        if spec is None:
            if options:
                raise ValueError(f"{self.engine} reads no options file")
            return
        for key, value in options.items():
            if key not in spec.keys:
                raise ValueError(f"{self.engine} options have no key {key!r}")
            if isinstance(value, dict):
                for sub, sub_value in value.items():
                    if sub not in spec.keys[key]:
                        raise ValueError(f"{self.engine} options have no key {key}.{sub}")
                    allowed = spec.choices.get(f"{key}.{sub}")
                    if allowed is not None and sub_value not in allowed:
                        raise ValueError(f"{key}.{sub} takes one of {allowed}, not {sub_value!r}")


@dataclass(frozen=True, slots=True)
class HelmChart:
    """The values shape of a serving chart: the keys a rendered values file may use."""

    chart: str
    source: Source
    model_spec_keys: frozenset[str]
    vllm_config_keys: frozenset[str]


def _read(name: str) -> dict[str, Any]:
    text = resources.files("app.deployments").joinpath("data").joinpath(name).read_text()
    document: dict[str, Any] = json.loads(text)
    return document


def _source(document: dict[str, Any]) -> Source:
    return Source(document["title"], document["url"], document["note"])


@cache
def engine_arguments(engine: Engine) -> EngineArguments:
    """The argument list of `engine` (read once per process)."""
    document = _read(f"{engine.value}.json")
    options = document["options_file"]
    return EngineArguments(
        engine=engine,
        version=document["version"],
        command=tuple(document["command"]),
        positional=tuple(document["positional"]),
        source=_source(document["source"]),
        health_path=document["health_path"],
        port=document["port"],
        image=document["image"],
        flags=frozenset(document["flags"]),
        choices={flag: tuple(values) for flag, values in document["choices"].items()},
        options_file=(
            None
            if options is None
            else OptionsFile(
                flag=options["flag"],
                name=options["name"],
                keys={key: tuple(subs) for key, subs in options["keys"].items()},
                choices={key: tuple(values) for key, values in options["choices"].items()},
            )
        ),
    )


@cache
def helm_chart() -> HelmChart:
    document = _read("helm.json")
    return HelmChart(
        chart=document["chart"],
        source=_source(document["source"]),
        model_spec_keys=frozenset(document["model_spec_keys"]),
        vllm_config_keys=frozenset(document["vllm_config_keys"]),
    )
