"""The ASGI handler for /v1/files and /v1/batches: the proxy's lean handler (no middleware)
with the upload limit of batch files instead of a proxied request's."""

from django.conf import settings

from routing.request_path.proxy_handler import ProxyHandler


class BatchApiHandler(ProxyHandler):
    lean_requests = False  # Django's request: multipart uploads, spooled to a file

    def body_limit(self) -> int:
        return settings.SLUICE_BATCH_MAX_FILE_BYTES + 64 * 1024  # the multipart envelope


PATHS = ("/v1/files", "/v1/batches")
