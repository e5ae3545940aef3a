"""No pages: these settings only migrate."""

urlpatterns: list = []
