"""One definition per concept: the schemas that are not derived from an engine spec are held to
it here, so a field added on one side fails until the other follows."""

from __future__ import annotations

import dataclasses

from app.catalog.schemas import (
    EfficiencyFractions,
    GpuHardware,
    InterconnectFields,
    MlaFields,
    ModelArchitecture,
    MoeFields,
    PeakFlops,
)
from app.engine.dtypes import BLOCK_SCALED_DTYPES, STORAGE_DTYPES, DType
from app.engine.planning import CandidatePlan, DisaggregatedPlan, PredictedLatency
from app.engine.specs import Efficiency, GpuSpec, InterconnectSpec, MlaSpec, ModelSpec, MoeSpec
from app.formats.run_document import RunModelSpec
from app.formats.specs import spec_fields
from app.plans.schemas import CandidateRead, DisaggregatedRead, PredictedRead
from app.web.schemas import StorageFormat


def _names(spec: type) -> set[str]:
    return {f.name for f in dataclasses.fields(spec)}


def test_model_schemas_are_the_spec() -> None:
    assert set(ModelArchitecture.model_fields) == set(spec_fields(ModelSpec)) - {"id"}
    assert set(MoeFields.model_fields) == set(spec_fields(MoeSpec))
    assert set(MlaFields.model_fields) == set(spec_fields(MlaSpec))
    # A run records what ran, not how the weights were published.
    published = {"checkpoint_dtype", "expert_checkpoint_dtype", "checkpoint_kv_dtype"}
    assert set(RunModelSpec.model_fields) == set(spec_fields(ModelSpec)) - published


def test_gpu_schemas_cover_the_gpu_spec() -> None:
    assert set(GpuHardware.model_fields) == _names(GpuSpec) - {"id"}
    # Block-scaled formats are storage only: they compute at the fp8 or fp4 rate (or bf16).
    compute_formats = {dtype.value for dtype in DType if dtype not in BLOCK_SCALED_DTYPES}
    assert set(PeakFlops.model_fields) == compute_formats
    assert set(InterconnectFields.model_fields) == _names(InterconnectSpec)
    assert set(EfficiencyFractions.model_fields) == _names(Efficiency) - {"source"}


def test_storage_formats_are_the_engines() -> None:
    assert [member.value for member in StorageFormat] == [d.value for d in STORAGE_DTYPES]


def test_plan_answers_read_the_planners_results() -> None:
    """Stored plans are `CandidateRead` read from `CandidatePlan` by attribute: every field of
    the answer is an attribute of the result (`feasible` is a property), but the error statement
    and interval the plans service adds from the catalog and the validation record
    (`app.plans.service._candidate`)."""
    for schema, result, added in (
        (CandidateRead, CandidatePlan, {"expected_error_pct", "error_interval_pct"}),
        (DisaggregatedRead, DisaggregatedPlan, set()),
        (PredictedRead, PredictedLatency, set()),
    ):
        attributes = _names(result) | {
            name for name, value in vars(result).items() if isinstance(value, property)
        }
        assert set(schema.model_fields) - added <= attributes, (schema, result)
        assert not added & attributes
