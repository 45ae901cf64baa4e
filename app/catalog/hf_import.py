"""Create a model catalog entry from a Hugging Face `config.json`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.catalog.orm import ModelRow
from app.catalog.service import Validator, model_entries
from app.errors import FieldProblem, InvalidInput
from app.formats.hf_config import HfConfigError, config_key, parse_hf_config

__all__ = ["import_hf_config"]


def import_hf_config(
    session: Session,
    entry_id: str,
    config: Mapping[str, Any],
    *,
    validate: Validator,
    name: str | None = None,
    hf_repo: str | None = None,
) -> tuple[ModelRow, tuple[str, ...]]:
    """Parse `config` and create the entry `entry_id`, its fields checked by `validate` as any
    other write of a model is (the catalog's bounds); a 422 names the config key at fault.
    Returns the entry and notes on what the config declares that is not modelled."""
    try:
        parsed = parse_hf_config(config)
        fields = parsed.as_dict()
    except HfConfigError as error:
        raise InvalidInput.at(f"config.{error.field}", error.message) from None
    fields["name"] = name or hf_repo or entry_id
    fields["hf_repo"] = hf_repo
    if hf_repo:
        fields["sources"] = [
            {
                "title": f"{hf_repo} config.json",
                "url": f"https://huggingface.co/{hf_repo}/blob/main/config.json",
                "covers": ["architecture"],
                "note": "imported through POST /v1/models/hf-import",
            }
        ]
    try:
        checked = validate(fields)
    except ValidationError as error:
        problems = tuple(
            FieldProblem(
                "config." + config_key(config, ".".join(str(part) for part in problem["loc"])),
                problem["msg"],
            )
            for problem in error.errors()
        )
        detail = "; ".join(f"{p.field}: {p.message}" for p in problems)
        raise InvalidInput(detail, problems) from None
    return model_entries(session).create(entry_id, checked), parsed.notes
