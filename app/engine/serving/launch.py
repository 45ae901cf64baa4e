"""What an engine's launch is made of: the planned replica and model it starts, the engine's
published command-line arguments (`data/<engine>.json`, read in the engine's own source: the file
and commit are in `source`), and the builder each policy's `launch` fills. Pure: typed inputs in,
text out, no I/O but reading the package's data.

Every setting of the plan either becomes the engine's own flag (checked against its published
arguments before it is returned: a misspelt or invented flag is a bug here, never a command an
operator finds broken at launch) or is reported as `Unsupported` with the reason; none is
dropped.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

from app.engine.dtypes import DType

__all__ = [
    "EngineArguments",
    "EngineLaunch",
    "LaunchBuilder",
    "OptionsFile",
    "PlannedReplica",
    "ServedModel",
    "Source",
    "Unsupported",
    "activation_dtype",
    "published_arguments",
]

SIXTEEN_BIT = (DType.BF16, DType.FP16)


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

    engine: str
    """The engine's name (`vllm`)."""
    version: str
    """The release line the list was read from."""
    command: tuple[str, ...]
    positional: tuple[str, ...]
    source: Source
    health_path: str
    port: int
    """The port the rendered command serves on."""
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


def source_of(document: Mapping[str, Any]) -> Source:
    return Source(document["title"], document["url"], document["note"])


@cache
def published_arguments(engine: str) -> EngineArguments:
    """The published argument list of the engine called `engine` (`data/<engine>.json`, read
    once per process)."""
    text = resources.files("app.engine.serving").joinpath("data", f"{engine}.json").read_text()
    document: dict[str, Any] = json.loads(text)
    options = document["options_file"]
    return EngineArguments(
        engine=engine,
        version=document["version"],
        command=tuple(document["command"]),
        positional=tuple(document["positional"]),
        source=source_of(document["source"]),
        health_path=document["health_path"],
        port=document["port"],
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

    engine: str
    argv: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)
    unsupported: tuple[Unsupported, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


def activation_dtype(model: ServedModel) -> DType:
    """The format a 16-bit engine computes in: the checkpoint's when 16-bit, else bf16 (what
    quantised checkpoints declare as their `torch_dtype`)."""
    return model.checkpoint_dtype if model.checkpoint_dtype in SIXTEEN_BIT else DType.BF16


class LaunchBuilder:
    """Collects one engine's flags, options, unsupported settings and notes; `done` checks them
    against its published arguments."""

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

    def quantisation(self, model: ServedModel, replica: PlannedReplica, flag: str) -> None:
        """Weights in another format than the checkpoint's: online FP8 where the engine's
        `flag` offers it, else reported."""
        weights, checkpoint = replica.weight_dtype, model.checkpoint_dtype
        if weights is checkpoint:
            return
        online = self.args.choices.get(flag, ())
        if weights is DType.FP8 and checkpoint in SIXTEEN_BIT and "fp8" in online:
            self.flag(flag, "fp8")
            self.notes.append(
                f"{flag} fp8 quantises the {checkpoint.value} checkpoint as it loads: a change "
                "in output quality to measure before serving"
            )
            return
        self.cannot(
            "weight_dtype",
            weights.value,
            f"{self.args.engine} cannot turn a {checkpoint.value} checkpoint into "
            f"{weights.value} weights as it loads: serve a checkpoint already quantised to "
            f"{weights.value} (give its path as model_path)",
        )

    def kv_value(
        self,
        model: ServedModel,
        replica: PlannedReplica,
        allowed: tuple[str, ...],
        names: Mapping[DType, str],
    ) -> str | None:
        """The engine's name for the planned KV-cache format among `allowed` (`auto` for the
        model's own dtype, else from `names`, the engine's names of formats); None: reported
        unsupported."""
        kv = replica.kv_dtype
        if kv is activation_dtype(model) and "auto" in allowed:
            return "auto"
        value = names.get(kv)
        if value is not None and value in allowed:
            return value
        self.cannot(
            "kv_dtype",
            kv.value,
            f"{self.args.engine}'s KV-cache formats are {', '.join(allowed)} ('auto' is the "
            f"model's {activation_dtype(model).value}): none stores {kv.value}",
        )
        return None

    def spans_nodes(self, replica: PlannedReplica) -> None:
        if replica.gpus_per_replica > replica.gpus_per_node:
            nodes = -(-replica.gpus_per_replica // replica.gpus_per_node)
            self.notes.append(
                f"one replica spans {nodes} nodes ({replica.gpus_per_replica} GPUs, "
                f"{replica.gpus_per_node} per node): start it with the engine's multi-node "
                "launch (one process group per node)"
            )

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
