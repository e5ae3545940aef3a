"""Configuration as code: download the catalog as TOML; upload a file, see what it would
create and change, then apply it (staff only)."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from console.access import actor_of, console_view
from console.forms import ConfigUploadForm
from routing.catalog.config_export import config_export
from routing.catalog.config_file import ConfigError
from routing.catalog.services import config_apply


@console_view(staff=True)
def config_page(request: HttpRequest) -> HttpResponse:
    return render(request, "console/config/index.html", {"form": ConfigUploadForm()})


@console_view(staff=True)
def config_download(request: HttpRequest) -> HttpResponse:
    response = HttpResponse(config_export(), content_type="application/toml; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M")
    response["Content-Disposition"] = f'attachment; filename="sluice-{stamp}.toml"'
    return response


@console_view(staff=True)
def config_upload(request: HttpRequest) -> HttpResponse:
    """POST a file: the dry run. POST `apply=1` with the same text: apply it."""
    if request.method != "POST":
        return config_page(request)
    form = ConfigUploadForm(request.POST, request.FILES)
    if not form.is_valid():
        return render(request, "console/config/index.html", {"form": form}, status=400)
    text = form.cleaned_data["text"]
    apply = request.POST.get("apply") == "1"
    try:
        diff = config_apply(text=text, actor=actor_of(request), dry_run=not apply)
    except ConfigError as exc:
        form.add_error(None, f"Nothing was changed: {exc}")
        return render(request, "console/config/index.html", {"form": form}, status=400)
    return render(request, "console/config/diff.html", {"diff": diff, "text": text})
