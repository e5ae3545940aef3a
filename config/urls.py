from django.contrib import admin
from django.contrib.staticfiles.views import serve as serve_static
from django.urls import include, path, re_path

from accounts.login_guard import login_throttled
from routing.request_path import views, views_messages

urlpatterns = [
    path("v1/chat/completions", views.chat_completions),
    path("v1/completions", views.completions),
    path("v1/embeddings", views.embeddings),
    path("v1/messages", views_messages.messages),
    path("v1/messages/count_tokens", views_messages.count_tokens),
    path("v1/responses", views.responses),
    path("v1/models", views.models_list),
    path("v1/models/<path:name>", views.model_detail),
    path("", include("batches.urls")),  # /v1/files, /v1/batches
    re_path(r"^v1/(?P<path>.*)$", views.not_found),
    # The admin's login, throttled like the console's (accounts/login_guard.py).
    path("admin/login/", login_throttled(admin.site.login)),
    path("admin/", admin.site.urls),
    path("api/v1/", include("api.urls")),
    # Our own static files (the API docs' Swagger UI and Redoc, the console's CSS), served
    # by Sluice itself: no CDN, no separate web server needed for a small install.
    re_path(r"^static/(?P<path>.*)$", serve_static, {"insecure": True}),
    # The console (templates/console/): last, it answers at /.
    path("", include("console.urls")),
]
