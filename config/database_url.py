"""Turn `DATABASE_URL` into a Django DATABASES entry (no extra dependency)."""

from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit


def parse_database_url(
    url: str, *, base_dir: Path, pgbouncer: bool = False, pool_max_size: int = 20
) -> dict[str, Any]:
    """`sqlite:///relative.db`, `sqlite:////abs/path.db` or `postgres://user:pw@host:port/db`.
    `pgbouncer`: PostgreSQL is reached through PgBouncer in transaction mode."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        raw = unquote(parts.path)
        # sqlite:///db.sqlite3 -> "/db.sqlite3" means relative; sqlite:////abs -> "//abs".
        path = Path(raw[1:]) if raw.startswith("/") else Path(raw)
        if not path.is_absolute():
            path = base_dir / path
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(path),
            "OPTIONS": {
                # WAL lets the gateway write audit rows while readers (console, tests) read.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
            "TEST": {"NAME": str(path.with_name(f"test_{path.name}"))},
        }
    if scheme in {"postgres", "postgresql", "pgsql"}:
        options: dict[str, Any] = dict(parse_qsl(parts.query))
        # Under ASGI the async ORM runs in threads; a pool keeps connection setup off each call.
        options.setdefault("pool", {"min_size": 1, "max_size": pool_max_size, "timeout": 10})
        if pgbouncer:
            # psycopg prepares a statement run 5 times on its server connection; under
            # transaction pooling the next run may land on another one that lacks it.
            options["prepare_threshold"] = None
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "CONN_MAX_AGE": 0,
            # A named cursor lives outside a transaction's end: not through PgBouncer.
            "DISABLE_SERVER_SIDE_CURSORS": pgbouncer,
            "OPTIONS": options,
        }
    raise ValueError(f"DATABASE_URL: unsupported scheme {scheme!r} (use sqlite or postgres)")
