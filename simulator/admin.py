"""The admin API's body, checked: `POST /admin/models/NAME` changes capacity and faults live."""

from __future__ import annotations

from typing import Any

from simulator.config import checked_fault_kind, checked_number, checked_probability
from simulator.requests import BadRequest


def admin_changes(req: Any) -> tuple[int | None, dict[str, float] | None, Any]:
    """Validate an admin body: (capacity, faults, retry_after), None / ... if absent."""
    usage = (
        'Body must be a JSON object with one or more of {"capacity": <integer >= 0>, '
        '"faults": {<kind>: <probability 0..1>, ...}, "retry_after": <seconds >= 0 or null>}'
    )
    if not isinstance(req, dict) or not req:
        raise BadRequest(usage)
    unknown = sorted(set(req) - {"capacity", "faults", "retry_after"})
    if unknown:
        raise BadRequest(f"Unknown key {unknown[0]!r}. {usage}")
    capacity = req.get("capacity")
    if "capacity" in req and (
        isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0
    ):
        raise BadRequest('Body must be JSON {"capacity": <integer >= 0>}', "capacity")
    faults = req.get("faults")
    if "faults" in req:
        if not isinstance(faults, dict):
            raise BadRequest(
                '"faults" must be an object {<kind>: <probability 0..1>}; {} clears them',
                "faults",
            )
        for kind, probability in faults.items():
            try:
                checked_fault_kind(kind, "faults")
                if not isinstance(probability, (int, float)):
                    raise ValueError(f"faults: probability of {kind} must be a number")
                checked_probability(probability, f"faults: probability of {kind}")
            except ValueError as exc:
                raise BadRequest(str(exc), "faults") from None
    retry_after: Any = ...
    if "retry_after" in req:
        retry_after = req["retry_after"]
        if retry_after is not None:
            if not isinstance(retry_after, (int, float)):
                raise BadRequest("retry_after must be a number of seconds or null", "retry_after")
            try:
                retry_after = checked_number(retry_after, "retry_after", float, 0, 86400)
            except ValueError as exc:
                raise BadRequest(str(exc), "retry_after") from None
    return capacity, faults, retry_after
