from rest_framework.pagination import CursorPagination, LimitOffsetPagination


class Page(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000


class NewestFirst(CursorPagination):
    """Calls, newest first: a cursor stays right while new calls arrive (no offsets)."""

    page_size = 100
    max_page_size = 1000
    page_size_query_param = "limit"
    ordering = ("-created_at", "-request_id")
