"""Domain errors. Services raise these; one handler in `app.web.problems` turns each into an
RFC 9457 problem document. A service never builds an HTTP response.

    DomainError
    ├── NotFound            404  (GpuNotFound, ModelNotFound, RunNotFound, PlanNotFound,
    │                             CalibrationNotFound, ProfileNotFound)
    ├── AlreadyExists       409
    ├── Conflict            409  (a unique value another entry holds)
    ├── PreconditionFailed  412  (If-Match names a version that is no longer current)
    └── InvalidInput        422  (well-formed but impossible: heads not divisible, ...)
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Any

from app.engine.specs import SpecError, rebuilt_exception

__all__ = [
    "AlreadyExists",
    "CalibrationNotFound",
    "Conflict",
    "DomainError",
    "FieldProblem",
    "GpuNotFound",
    "InvalidInput",
    "ModelNotFound",
    "NotFound",
    "PlanNotFound",
    "PreconditionFailed",
    "ProfileNotFound",
    "RunNotFound",
    "invalid_spec",
    "spec_errors",
]


@dataclass(frozen=True, slots=True)
class FieldProblem:
    """One reason a request was refused, at a dotted field path of the request body."""

    field: str
    message: str
    location: str = "body"


class DomainError(Exception):
    """What went wrong (`detail`), at which fields (`errors`); `status`, `slug` and `title` say
    how the API answers it."""

    status: int = 400
    slug: str = "bad-request"
    title: str = "Bad request"

    def __init__(self, detail: str, errors: tuple[FieldProblem, ...] = ()) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors

    def __reduce__(self) -> tuple[Any, ...]:
        # Whatever the subclass's __init__ takes: raised in a heavy-work process, it is pickled.
        return (rebuilt_exception, (type(self), self.args, self.__dict__))


class NotFound(DomainError):
    status = 404
    slug = "not-found"
    title = "Not found"


class GpuNotFound(NotFound):
    def __init__(self, gpu_id: str, hint: str = "") -> None:
        super().__init__(f"No GPU with id {gpu_id!r} in the catalog{hint}.")
        self.gpu_id = gpu_id


class ModelNotFound(NotFound):
    def __init__(self, model_id: str, hint: str = "") -> None:
        super().__init__(f"No model with id {model_id!r} in the catalog{hint}.")
        self.model_id = model_id


class RunNotFound(NotFound):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"No benchmark run with id {run_id!r}.")
        self.run_id = run_id


class PlanNotFound(NotFound):
    def __init__(self, plan_id: str) -> None:
        super().__init__(f"No plan with id {plan_id!r}.")
        self.plan_id = plan_id


class CalibrationNotFound(NotFound):
    def __init__(self, gpu_id: str, calibration_id: str) -> None:
        super().__init__(f"GPU {gpu_id!r} has no calibration with id {calibration_id!r}.")
        self.gpu_id = gpu_id
        self.calibration_id = calibration_id


class ProfileNotFound(NotFound):
    def __init__(self, profile_id: str) -> None:
        super().__init__(f"No profile with id {profile_id!r}.")
        self.profile_id = profile_id


class AlreadyExists(DomainError):
    status = 409
    slug = "already-exists"
    title = "Already exists"


class Conflict(DomainError):
    status = 409
    slug = "conflict"
    title = "Conflict"


class Forbidden(DomainError):
    status = 403
    slug = "forbidden"
    title = "Forbidden"


class PreconditionFailed(DomainError):
    status = 412
    slug = "precondition-failed"
    title = "Precondition failed"


class InvalidInput(DomainError):
    status = 422
    slug = "invalid-input"
    title = "Invalid input"

    @classmethod
    def at(cls, field: str, message: str) -> InvalidInput:
        return cls(f"{field}: {message}", (FieldProblem(field, message),))


def invalid_spec(error: SpecError, prefix: str = "") -> InvalidInput:
    """A 422 naming the request field behind an engine `SpecError` (under `prefix`, the request
    field the engine's spec came from: `model`, `gpu`, `workload`)."""
    field = f"{prefix}.{error.field}" if prefix else error.field
    return InvalidInput.at(field, error.message)


class spec_errors:  # noqa: N801 - used as a function: `with spec_errors():`
    """Within the block, an engine `SpecError` is a 422 naming its field (`invalid_spec`): the
    one place impossible input turns into an answer. A class rather than a generator-based
    context manager: every estimate enters one, and this costs a third as much."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if isinstance(error, SpecError):
            raise invalid_spec(error, self.prefix) from None
