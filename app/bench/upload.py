"""Uploads a run document to a Ridgeline service: `POST {URL}/v1/benchmark-runs`.

The service answers 201 with the stored run (its `id`), or an RFC 9457 problem document whose
`title` and `detail` `UploadError` carries to the user. Torch-free.
"""

from __future__ import annotations

from typing import Any

import httpx

from app.formats.run_document import RunDocument

__all__ = ["UploadError", "upload_run"]

_HTTP_TIMEOUT_S = 60.0


class UploadError(Exception):
    """The service refused the run or could not be reached; `status` is null when no answer."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _problem_text(response: httpx.Response) -> str:
    """`title: detail` of a problem document, else the start of the body."""
    try:
        body: Any = response.json()
    except ValueError:
        return response.text[:500] or response.reason_phrase
    if isinstance(body, dict):
        parts = [str(body[key]) for key in ("title", "detail") if body.get(key)]
        if parts:
            return ": ".join(parts)
    return response.text[:500]


def upload_run(
    document: RunDocument,
    service_url: str,
    api_key: str,
    *,
    client: httpx.Client | None = None,
) -> str:
    """Post `document` with `Authorization: Bearer {api_key}` and return the id the service
    assigned. Raises `UploadError` with the server's problem detail on any non-2xx answer."""
    url = f"{service_url.rstrip('/')}/v1/benchmark-runs"
    owned = client is None
    http = client if client is not None else httpx.Client(timeout=_HTTP_TIMEOUT_S)
    try:
        response = http.post(
            url,
            json=document.model_dump(mode="json"),
            headers={"Authorization": f"Bearer {api_key}"},
        )
    except httpx.HTTPError as error:
        raise UploadError(f"upload to {url} failed: {error}") from error
    finally:
        if owned:
            http.close()
    if not response.is_success:
        raise UploadError(
            f"upload to {url} refused with HTTP {response.status_code}: {_problem_text(response)}",
            status=response.status_code,
        )
    try:
        run_id = response.json()["id"]
    except (ValueError, KeyError, TypeError) as error:
        raise UploadError(
            f"upload to {url} answered {response.status_code} without a run id",
            status=response.status_code,
        ) from error
    return str(run_id)
