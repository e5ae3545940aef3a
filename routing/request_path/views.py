"""The OpenAI-compatible endpoints. Thin: the request path is in routing/request_path/proxy.py."""

import json
import time

from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from accounts.authentication import authenticate, presented_key
from core.errors import GatewayError
from routing.catalog.specs import catalog
from routing.request_path.payloads import Endpoint
from routing.request_path.protocols.openai_responses import RESPONSES
from routing.request_path.proxy import handle

_STARTED = int(time.time())


def _method_not_allowed(request: HttpRequest, allowed: str) -> HttpResponse:
    error = GatewayError(
        405, f"{request.method} is not allowed here; use {allowed}.", code="method_not_allowed"
    )
    response = error.response()
    response["Allow"] = allowed
    return response


def _post_endpoint(endpoint: Endpoint):
    @csrf_exempt
    async def view(request: HttpRequest) -> HttpResponseBase:
        if request.method != "POST":
            return _method_not_allowed(request, "POST")
        return await handle(request, endpoint)

    view.__name__ = endpoint.name.lower()
    return view


chat_completions = _post_endpoint(Endpoint.CHAT)
completions = _post_endpoint(Endpoint.COMPLETIONS)
embeddings = _post_endpoint(Endpoint.EMBEDDINGS)


@csrf_exempt
async def responses(request: HttpRequest) -> HttpResponseBase:
    """OpenAI's Responses API, stateless: translated to a chat request and back."""
    if request.method != "POST":
        return _method_not_allowed(request, "POST")
    return await handle(request, Endpoint.CHAT, protocol=RESPONSES)


def _model_object(name: str) -> dict[str, object]:
    return {"id": name, "object": "model", "created": _STARTED, "owned_by": "sluice"}


async def _visible_models(request: HttpRequest) -> list[str]:
    principal = await authenticate(presented_key(request.headers))
    routes = await catalog.routes()
    return sorted(name for name in routes if name in principal.allowed_routes)


async def models_list(request: HttpRequest) -> HttpResponse:
    """The routes this key's application may use."""
    if request.method != "GET":
        return _method_not_allowed(request, "GET")
    try:
        names = await _visible_models(request)
    except GatewayError as error:
        return error.response()
    body = {"object": "list", "data": [_model_object(name) for name in names]}
    return HttpResponse(json.dumps(body), content_type="application/json")


async def model_detail(request: HttpRequest, name: str) -> HttpResponse:
    if request.method != "GET":
        return _method_not_allowed(request, "GET")
    try:
        names = await _visible_models(request)
    except GatewayError as error:
        return error.response()
    if name not in names:
        return GatewayError(
            404, f"The model `{name}` does not exist.", code="model_not_found", param="model"
        ).response()
    return HttpResponse(json.dumps(_model_object(name)), content_type="application/json")


async def not_found(request: HttpRequest, path: str = "") -> HttpResponse:
    return GatewayError(
        404, f"Unknown endpoint: {request.method} {request.path}", code="unknown_url"
    ).response()
