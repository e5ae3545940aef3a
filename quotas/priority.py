"""The priority class a call runs in: the application's, or lower if the request asks."""

from accounts.models import PriorityClass
from core.errors import bad_request

_RANK = {PriorityClass.BATCH: 0, PriorityClass.INTERACTIVE: 1}


def priority_for(*, application_default: str, requested: str | None) -> str:
    """`X-Sluice-Priority` may lower the class, never raise it above the application's: a
    batch application asking for interactive is kept at batch."""
    if not requested:
        return application_default
    wanted = requested.strip().lower()
    if wanted not in _RANK:
        raise bad_request(
            "X-Sluice-Priority must be 'interactive' or 'batch'.", param="X-Sluice-Priority"
        )
    return min(wanted, application_default, key=lambda c: _RANK[PriorityClass(c)])
