"""/v1/files and /v1/batches (included by config/urls.py before the proxy's catch-all)."""

from django.urls import path

from batches import views

urlpatterns = [
    path("v1/files", views.files),
    path("v1/files/<str:file_id>", views.file_detail),
    path("v1/files/<str:file_id>/content", views.file_content),
    path("v1/batches", views.batches),
    path("v1/batches/<str:batch_id>", views.batch_detail),
    path("v1/batches/<str:batch_id>/cancel", views.batch_cancel),
]
