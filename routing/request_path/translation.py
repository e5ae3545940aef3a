"""Which shape a call travels in along its route: the client's own to deployments of its
kind, chat completions to the others (translated once, before the chain walk, degrading
what has no equivalent; a route set to `translation = "strict"` refuses instead). A
Responses call that depends on stored state is pinned to the deployment that holds it.
"""

import dataclasses

from routing.catalog.specs import RouteSpec
from routing.request_path.payloads import ClientRequest
from routing.request_path.protocols import ClientProtocol, Degrade
from routing.request_path.protocols.anthropic_upstream import check_request
from routing.request_path.protocols.native import RESPONSES_KIND

STRICT = "strict"
_STATEFUL = ("previous_response_id", "conversation")


def shape_for(route: RouteSpec, protocol: ClientProtocol, request: ClientRequest) -> RouteSpec:
    """The route the call walks (pinned, for stored Responses state), with the request's
    chat translation made when a deployment of another kind may serve it."""
    route = pinned(route, request)
    degrade = Degrade(strict=route.translation == STRICT)
    native = request.native
    if native is not None and any(d.upstream.kind != native.kind for d in route.chain):
        protocol.translate(request, degrade)
    check_request(route, request, degrade)  # a chat request to an Anthropic deployment
    request.degraded = degrade.notes
    return route


def pinned(route: RouteSpec, request: ClientRequest) -> RouteSpec:
    """`previous_response_id`, `conversation` or `store: true` on a Responses call: the
    state lives at one upstream, so the call goes only to the route's first
    `openai-responses` deployment (no fallback: another one has not the state; when it is
    full the call queues there and then gets 503 with Retry-After, when it is down 502).
    A route with no such deployment goes on as it is (the translation refuses stored
    state by name, or drops `store`)."""
    if not request.passes_through(RESPONSES_KIND):
        return route
    body = request.body
    if not (any(body.get(name) is not None for name in _STATEFUL) or body.get("store") is True):
        return route
    holder = next((d for d in route.chain if d.upstream.kind == RESPONSES_KIND), None)
    if holder is None:
        return route
    # `store: true` makes the state here: its follow-ups must find it at the same place.
    return dataclasses.replace(route, chain=(holder,))
