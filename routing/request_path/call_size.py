"""How much of its quotas a call asks for, worked out from the request before any upstream
is called: the application's ceilings on `max_tokens` and `n`, the tokens it may take and
the most it may cost. Quotas (quotas.reservation) then reserve that much."""

from accounts.authentication import Principal
from accounts.models import PriorityClass
from core.errors import bad_request
from quotas.reservation import Ticket, reserve_quota
from routing.catalog.specs import RouteSpec
from routing.request_path.payloads import ClientRequest, Endpoint


async def reserve_call_quota(
    principal: Principal,
    request: ClientRequest,
    route: RouteSpec,
    raw_size: int,
    request_id: str,
    *,
    priority: str = PriorityClass.INTERACTIVE,
) -> Ticket | None:
    """Reserve the call's most on the principal's limits (see `quotas.reserve_quota`);
    `raw_size`: the request body's length in bytes."""
    tokens = estimated_tokens(principal, request, raw_size)
    return await reserve_quota(
        principal,
        tokens=tokens,
        cost_ceiling=cost_ceiling(route, tokens),
        slot=request_id,
        priority=priority,
    )


def cost_ceiling(route: RouteSpec, tokens: int) -> float:
    """The most `tokens` may cost on the route: every token at its dearest output price."""
    prices = [d.output_price_per_million for d in route.chain] or [0]
    return tokens * float(max(prices)) / 1_000_000


def enforce_ceilings(principal: Principal, request: ClientRequest) -> None:
    """The application's ceilings on `max_tokens` (clamped or refused) and on `n`."""
    n = request.body.get("n") or 1
    if principal.max_n is not None and n > principal.max_n:
        raise bad_request(
            f"Application {principal.application_slug} allows n up to {principal.max_n}.",
            param="n",
        )
    ceiling = principal.max_tokens_ceiling
    if ceiling is None:
        return
    clamped = {}
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        asked = request.body.get(name)
        if asked is not None and asked > ceiling:
            if not principal.clamp_max_tokens:
                raise bad_request(
                    f"Application {principal.application_slug} allows {name} up to {ceiling}.",
                    param=name,
                )
            request.body[name] = clamped[name] = ceiling
    native = request.native
    if native is not None and request.translated:
        # The client's own body, for deployments of its kind, is clamped the same way.
        name = "max_output_tokens" if native.kind == "openai-responses" else "max_tokens"
        asked = request.body.get("max_tokens")
        if asked is not None:
            native.overrides[name] = asked
    elif native is not None:
        # Only what changed: a field left as the client wrote it is not looked for in its
        # bytes (routing/request_path/protocols/native.py `with_fields`).
        native.overrides.update(clamped)


def estimated_tokens(principal: Principal, request: ClientRequest, raw_size: int) -> int:
    """Prompt (about 4 bytes a token, counted on the raw body: never too low) plus the
    most the answer may take."""
    prompt = raw_size // 4 + 1
    if request.endpoint is Endpoint.EMBEDDINGS:
        return prompt
    body = request.body
    out = (
        body.get("max_completion_tokens")
        or body.get("max_tokens")
        or body.get("max_output_tokens")
        or principal.default_max_tokens
    )
    out = min(out, principal.max_tokens_ceiling or out)
    return prompt + out * (body.get("n") or 1)
