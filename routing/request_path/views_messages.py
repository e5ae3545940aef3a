"""Anthropic's Messages API for clients (`/v1/messages`): thin views; the request goes
through the one request path (routing/request_path/proxy.py) translated by
routing/request_path/protocols/."""

import json

from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from accounts.authentication import authenticate, presented_key
from core.errors import GatewayError
from routing.catalog.specs import catalog
from routing.request_path.payloads import Endpoint, load_body
from routing.request_path.protocols.anthropic_messages import ANTHROPIC, messages_request_to_chat
from routing.request_path.proxy import handle


def _refusal(error: GatewayError) -> HttpResponse:
    response = error.response()
    response.content = ANTHROPIC.error(error.status, response.content)
    return response


def _post_only(request: HttpRequest) -> HttpResponse | None:
    if request.method == "POST":
        return None
    response = _refusal(
        GatewayError(
            405, f"{request.method} is not allowed here; use POST.", code="method_not_allowed"
        )
    )
    response["Allow"] = "POST"
    return response


@csrf_exempt
async def messages(request: HttpRequest) -> HttpResponseBase:
    return _post_only(request) or await handle(request, Endpoint.CHAT, protocol=ANTHROPIC)


@csrf_exempt
async def count_tokens(request: HttpRequest) -> HttpResponseBase:
    """An estimate (about 4 characters a token, the estimate Sluice's own limits use) of
    the prompt's tokens: no upstream is called, nothing is charged."""
    refused = _post_only(request)
    if refused is not None:
        return refused
    try:
        principal = await authenticate(presented_key(request.headers))
        body = load_body(request.body)
        chat = messages_request_to_chat({"max_tokens": 1, **body})
        model = str(chat.get("model") or "")
        if model not in (await catalog.routes()) or model not in principal.allowed_routes:
            raise GatewayError(
                404, f"The model `{model}` does not exist.", code="model_not_found", param="model"
            )
    except GatewayError as error:
        return _refusal(error)
    text = json.dumps([chat["messages"], chat.get("tools")], ensure_ascii=False)
    return HttpResponse(
        json.dumps({"input_tokens": len(text) // 4 + 1}), content_type="application/json"
    )
