"""Sortable, paged tables: `?sort=column` (or `-column`) and `?page=N`, one shape for
every console list. Only declared columns sort, on the database field each names (or, for a
list of computed rows, the attribute)."""

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.core.paginator import Page, Paginator
from django.http import HttpRequest

PER_PAGE = 25


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    order_by: str | None = None  # the field to sort on; None: not sortable


@dataclass
class HeaderCell:
    key: str
    label: str
    url: str | None  # None: not sortable
    direction: str  # "asc", "desc" or "" (not the current sort)


@dataclass
class Table:
    page: Page
    headers: list[HeaderCell]
    sort: str
    query: dict[str, str]

    @property
    def rows(self) -> list[Any]:
        return list(self.page.object_list)

    def page_url(self, number: int) -> str:
        return "?" + urlencode({**self.query, "sort": self.sort, "page": number})

    @property
    def previous_url(self) -> str | None:
        return self.page_url(self.page.previous_page_number()) if self.page.has_previous() else None

    @property
    def next_url(self) -> str | None:
        return self.page_url(self.page.next_page_number()) if self.page.has_next() else None


def _ordered(rows: Any, field: str, tiebreak: str, *, descending: bool) -> Any:
    """A queryset ordered by the database; a list (rows already computed, e.g. grouped in
    Python) by the attributes of the same names."""
    if hasattr(rows, "order_by"):
        sign = "-" if descending else ""
        return rows.order_by(sign + field, sign + tiebreak)
    return sorted(rows, key=lambda r: (getattr(r, field), getattr(r, tiebreak)), reverse=descending)


def table(
    request: HttpRequest,
    queryset: Any,
    columns: list[Column],
    *,
    default_sort: str,
    per_page: int = PER_PAGE,
    tiebreak: str = "pk",
) -> Table:
    by_key = {c.key: c for c in columns if c.order_by}
    sort = request.GET.get("sort", default_sort)
    if sort.lstrip("-") not in by_key:
        sort = default_sort
    column = by_key[sort.lstrip("-")]
    descending = sort.startswith("-")
    ordered = _ordered(queryset, column.order_by, tiebreak, descending=descending)  # type: ignore[arg-type]
    paginator = Paginator(ordered, per_page)
    page = paginator.get_page(request.GET.get("page"))
    query = {k: v for k, v in request.GET.items() if k not in ("sort", "page")}
    headers = []
    for c in columns:
        if not c.order_by:
            headers.append(HeaderCell(c.key, c.label, None, ""))
            continue
        current = sort.lstrip("-") == c.key
        next_sort = c.key if (current and descending) or not current else f"-{c.key}"
        headers.append(
            HeaderCell(
                c.key,
                c.label,
                "?" + urlencode({**query, "sort": next_sort}),
                ("desc" if descending else "asc") if current else "",
            )
        )
    return Table(page=page, headers=headers, sort=sort, query=query)
