"""Sluice settings: one module, read from environment variables."""

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from config.database_url import parse_database_url
from core.redis_client import cache_location

BASE_DIR = Path(__file__).resolve().parent.parent
STATE_DIR = BASE_DIR / ".sluice"


def _env_bool(name: str, default: bool = False) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in {"1", "true", "yes", "on"}


def _local_secret_key() -> str:
    """A per-checkout key for development, so `make run` needs no setup; set
    SLUICE_SECRET_KEY in production."""
    path = STATE_DIR / "secret_key"
    if not path.exists():
        STATE_DIR.mkdir(exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


# Production behind a TLS-terminating proxy (deploy/: HAProxy): the proxy says the request
# came over HTTPS (X-Forwarded-Proto, which it must set itself, never pass on), cookies are
# sent over HTTPS only, plain HTTP is redirected and browsers are told to keep to HTTPS (HSTS).
SLUICE_HTTPS = _env_bool("SLUICE_HTTPS")
if SLUICE_HTTPS and not os.environ.get("SLUICE_SECRET_KEY"):
    raise ImproperlyConfigured("SLUICE_HTTPS is set: set SLUICE_SECRET_KEY too (50+ characters)")
SECRET_KEY = os.environ.get("SLUICE_SECRET_KEY") or _local_secret_key()
DEBUG = _env_bool("SLUICE_DEBUG")
ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("SLUICE_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",")
    if h.strip()
]
if SLUICE_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True  # the console and API; /healthz and /v1/ answer before Django
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("SLUICE_HSTS_SECONDS", 365 * 24 * 3600))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("SLUICE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = _env_bool("SLUICE_HSTS_PRELOAD")
# Asking browsers to preload HSTS for the domain is the domain owner's choice, not a default.
SILENCED_SYSTEM_CHECKS = [] if SLUICE_HTTPS and SECURE_HSTS_PRELOAD else ["security.W021"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "core",
    "accounts",
    "quotas",
    "routing",
    "batches",
    "reports",
    "console",
    "api",
]

# The proxy (/v1/) is served by a handler without this stack (see config/asgi.py):
# every MiddlewareMixin hook is a thread hop under ASGI.
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A page whose database is down: 503 saying so, never a 500 (console/outage.py).
    "console.outage.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.context.console",
            ],
        },
    },
]

# PostgreSQL through PgBouncer in transaction mode: no server-side prepared statements or
# cursors (a transaction's next statement may run on another server connection).
SLUICE_DB_PGBOUNCER = _env_bool("SLUICE_DB_PGBOUNCER")
# Connections each worker's psycopg pool may open (PostgreSQL, or PgBouncer's clients).
SLUICE_DB_POOL_MAX_SIZE = int(os.environ.get("SLUICE_DB_POOL_MAX_SIZE", 20))
DATABASES = {
    "default": parse_database_url(
        os.environ.get("DATABASE_URL", "sqlite:///db.sqlite3"),
        base_dir=BASE_DIR,
        pgbouncer=SLUICE_DB_PGBOUNCER,
        pool_max_size=SLUICE_DB_POOL_MAX_SIZE,
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# One server (redis://…) or a primary behind Sentinel (redis+sentinel://…; core/redis_client.py).
REDIS_URL = os.environ.get("REDIS_URL", "")
# Every key Sluice writes to Redis starts with this, so installations (or test runs) can
# share one Redis without seeing each other's state.
SLUICE_REDIS_PREFIX = os.environ.get("SLUICE_REDIS_PREFIX", "sluice")
# Sluice's own caches live in each worker (core/refresh.py) and its shared state in Redis
# through its own clients; Django's cache serves only django-ratelimit's counts. The default
# alias Django requires stays in process: nothing uses it.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
if REDIS_URL:
    CACHES["ratelimit"] = {
        "BACKEND": "quotas.ratelimit_cache.RateLimitRedisCache",
        **cache_location(REDIS_URL),
        "KEY_PREFIX": SLUICE_REDIS_PREFIX,
    }
else:
    # One process: django-ratelimit's counts are per worker (docs/quotas.md).
    CACHES["ratelimit"] = {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "ratelimit",
    }
RATELIMIT_USE_CACHE = "ratelimit"
# The management API's throttle counts (api/throttles.py): shared by every worker on Redis.
CACHES["api"] = (
    {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        **cache_location(REDIS_URL),
        "KEY_PREFIX": SLUICE_REDIS_PREFIX,
    }
    if REDIS_URL
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "api"}
)

# Django's standard validators, on every way a password is set (console and API member
# creation through accounts.services.member_create, password change, the admin).
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Login attempts (console and admin; accounts/login_guard.py), django-ratelimit's rates.
SLUICE_LOGIN_RATE_ADDRESS = os.environ.get("SLUICE_LOGIN_RATE_ADDRESS", "20/m")
SLUICE_LOGIN_RATE_ACCOUNT = os.environ.get("SLUICE_LOGIN_RATE_ACCOUNT", "5/m")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
# The console: Django's own login, sessions and CSRF.
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"
# Passwords, unless single sign-on keeps them to its break-glass accounts (docs/sso.md).
AUTHENTICATION_BACKENDS = ["accounts.password_backend.PasswordBackend"]

# The proxy reads the body itself; Django's own cap would answer outside OpenAI's error shape.
DATA_UPLOAD_MAX_MEMORY_SIZE = None

# --- Sluice ---------------------------------------------------------------------------
# Environment variables an upstream's `api_key_env` may name: names, or prefixes ending
# in "*". DATABASE_URL, REDIS_URL, SLUICE_SECRET_KEY and SLUICE_METRICS_TOKEN never are.
SLUICE_UPSTREAM_KEY_ENV = [
    name.strip()
    for name in os.environ.get(
        "SLUICE_UPSTREAM_KEY_ENV", "SLUICE_UPSTREAM_*,OPENAI_API_KEY,ANTHROPIC_API_KEY"
    ).split(",")
    if name.strip()
]
# Bodies outside /v1/ (console, management API, admin): refused past this while they arrive
# (config/bounded_handler.py); they share SLUICE_BODY_SECONDS with the proxy.
SLUICE_CONSOLE_MAX_BODY_BYTES = int(
    os.environ.get("SLUICE_CONSOLE_MAX_BODY_BYTES", 4 * 1024 * 1024)
)
SLUICE_MAX_BODY_BYTES = int(os.environ.get("SLUICE_MAX_BODY_BYTES", 10 * 1024 * 1024))
# How long a worker trusts what it cached about a key or the route catalog. Revoking a key
# or editing a route takes effect on every worker within this many seconds.
SLUICE_KEY_CACHE_SECONDS = float(os.environ.get("SLUICE_KEY_CACHE_SECONDS", 2))
SLUICE_CATALOG_CACHE_SECONDS = float(os.environ.get("SLUICE_CATALOG_CACHE_SECONDS", 2))
# While a worker proves it has heard every change up to within the times above (with
# Redis its listener, without it the change log it reads), it keeps those values this long
# instead (core/refresh.py): changes still reach it at once; this only bounds a change
# made behind Sluice's back. 0: off.
SLUICE_CACHE_TRUSTED_SECONDS = float(os.environ.get("SLUICE_CACHE_TRUSTED_SECONDS", 30))
# Without Redis, how often a worker reads the database's change log (core/change_log.py):
# a change another process makes (a management command, the batch runner) reaches it
# within this.
SLUICE_CHANGE_POLL_SECONDS = float(os.environ.get("SLUICE_CHANGE_POLL_SECONDS", 0.5))
# How long a call waits on the database for something it needs and no worker has cached
# (a key seen for the first time): past it, 503 with Retry-After.
SLUICE_DB_REQUEST_SECONDS = float(os.environ.get("SLUICE_DB_REQUEST_SECONDS", 2))
# Stale if error: while the database does not answer, a cached key, route or limit is
# still served this long past its time to live (core/refresh.py); a change still drops it.
SLUICE_STALE_IF_ERROR_SECONDS = float(os.environ.get("SLUICE_STALE_IF_ERROR_SECONDS", 300))
# A key prefix no worker knows is looked for in a load of every prefix (one query), at most
# one load this often per worker, however many made-up prefixes arrive (accounts/authentication.py).
SLUICE_KEY_PREFIXES_RELOAD_SECONDS = float(os.environ.get("SLUICE_KEY_PREFIXES_RELOAD_SECONDS", 1))
# How long an unknown key prefix is remembered as unknown (no database query for it).
SLUICE_UNKNOWN_KEY_CACHE_SECONDS = float(os.environ.get("SLUICE_UNKNOWN_KEY_CACHE_SECONDS", 30))
# How long a client may take to send the body it announced (408 after).
SLUICE_BODY_SECONDS = float(os.environ.get("SLUICE_BODY_SECONDS", 30))
# SIGTERM drains a worker (config/draining.py): readiness says 503 at once, calls still
# running this many seconds later are cut, then the process writes its audit rows and exits.
SLUICE_DRAIN_SECONDS = float(os.environ.get("SLUICE_DRAIN_SECONDS", 30))
# A worker's full garbage collection runs this often (core/gc_schedule.py), not on Python's
# own schedule, which under load paused the worker every few seconds; 0: Python's schedule.
SLUICE_GC_FULL_SECONDS = float(os.environ.get("SLUICE_GC_FULL_SECONDS", 300))
# Readiness (/healthz, config/health.py): how long the database and Redis may take to
# answer, and how long one result serves every probe.
SLUICE_HEALTH_TIMEOUT_SECONDS = float(os.environ.get("SLUICE_HEALTH_TIMEOUT_SECONDS", 1))
SLUICE_HEALTH_CACHE_SECONDS = float(os.environ.get("SLUICE_HEALTH_CACHE_SECONDS", 1))
# How long the database or Redis must fail on end before readiness says 503: they are
# shared, and a failover or a PgBouncer restart must not take every worker out at once.
SLUICE_HEALTH_GRACE_SECONDS = float(os.environ.get("SLUICE_HEALTH_GRACE_SECONDS", 15))
# Audit rows are written in batches off the request path.
SLUICE_AUDIT_FLUSH_SECONDS = float(os.environ.get("SLUICE_AUDIT_FLUSH_SECONDS", 1.0))
# Where each worker spools the calls it has not written yet ("" : nowhere), so a worker
# killed before its batch is written loses no row; a folder on this host's own disk.
SLUICE_AUDIT_SPOOL_DIR = os.environ.get("SLUICE_AUDIT_SPOOL_DIR", str(STATE_DIR / "audit-spool"))
# When Redis is unreachable, quotas are enforced by each worker on its own counters
# ("open", the default: calls keep flowing, limits hold per worker) or every call that has
# limits is refused with 503 ("closed").
SLUICE_QUOTAS_WHEN_REDIS_DOWN = os.environ.get("SLUICE_QUOTAS_WHEN_REDIS_DOWN", "open")
# A reservation's lease in Redis's ledger of pending reservations (quotas/counters/redis.py):
# a dead worker's tokens come back this long after it stops renewing; a worker cut off from
# Redis for longer has its calls' reservations taken back (and charged again when they end).
SLUICE_QUOTA_PENDING_LEASE_SECONDS = float(os.environ.get("SLUICE_QUOTA_PENDING_LEASE_SECONDS", 30))
# Retry-After sent with a 503 when every deployment in the chain is at capacity.
SLUICE_CAPACITY_RETRY_AFTER = int(os.environ.get("SLUICE_CAPACITY_RETRY_AFTER", 5))
# How long a call may wait in a deployment's queue for a slot, per priority class (seconds;
# X-Sluice-Max-Wait and the route's timeout shorten it). Off: no queue, no classes, no
# fair share; a full deployment is answered at once (first come, first served).
SLUICE_WAIT_INTERACTIVE = float(os.environ.get("SLUICE_WAIT_INTERACTIVE", 5))
SLUICE_WAIT_BATCH = float(os.environ.get("SLUICE_WAIT_BATCH", 120))
SLUICE_PRIORITY_ADMISSION = _env_bool("SLUICE_PRIORITY_ADMISSION", True)
# Share of every quota scope's requests per minute, tokens per minute and concurrency that
# batch calls may not take: kept for interactive calls (0 lends batch all of it).
SLUICE_QUOTA_INTERACTIVE_RESERVE = float(os.environ.get("SLUICE_QUOTA_INTERACTIVE_RESERVE", 0.2))
if not 0 <= SLUICE_QUOTA_INTERACTIVE_RESERVE < 1:
    raise ValueError("SLUICE_QUOTA_INTERACTIVE_RESERVE must be at least 0 and below 1")
# The response cache (routing/request_path/response_cache.py, opt-in per application): the bytes it
# may hold in all (least recently used out first) and the largest answer it stores.
SLUICE_CACHE_MAX_BYTES = int(os.environ.get("SLUICE_CACHE_MAX_BYTES", 64 * 1024 * 1024))
SLUICE_CACHE_MAX_ENTRY_BYTES = int(os.environ.get("SLUICE_CACHE_MAX_ENTRY_BYTES", 1024 * 1024))
# How often the console's capacity board refreshes itself (seconds).
SLUICE_CONSOLE_REFRESH_SECONDS = float(os.environ.get("SLUICE_CONSOLE_REFRESH_SECONDS", 5))
# Audit retention: `manage.py prune_audit` deletes calls older than this many days when no
# --older-than is given (unset: it must be given). Usage rollups are kept.
SLUICE_AUDIT_RETENTION_DAYS = (
    float(os.environ["SLUICE_AUDIT_RETENTION_DAYS"])
    if os.environ.get("SLUICE_AUDIT_RETENTION_DAYS")
    else None
)
# GET /metrics (Prometheus): a bearer token; unset, only loopback clients may read it.
SLUICE_METRICS_TOKEN = os.environ.get("SLUICE_METRICS_TOKEN", "")
# The capacity alert: a deployment whose capacity-error share over the window passes
# SLUICE_CAPACITY_ALERT_SHARE (with at least the minimum of attempts in the window) is
# flagged in the console, logged and posted to the webhook (Slack-compatible {"text": ...})
# once per crossing, and once when it falls back under share x RECOVER_RATIO.
SLUICE_CAPACITY_ALERT_SHARE = float(os.environ.get("SLUICE_CAPACITY_ALERT_SHARE", 0.2))
SLUICE_CAPACITY_ALERT_WINDOW_SECONDS = int(
    os.environ.get("SLUICE_CAPACITY_ALERT_WINDOW_SECONDS", 300)
)
SLUICE_CAPACITY_ALERT_MIN_ATTEMPTS = int(os.environ.get("SLUICE_CAPACITY_ALERT_MIN_ATTEMPTS", 20))
SLUICE_CAPACITY_ALERT_RECOVER_RATIO = float(
    os.environ.get("SLUICE_CAPACITY_ALERT_RECOVER_RATIO", 0.5)
)
SLUICE_CAPACITY_ALERT_WEBHOOK_URL = os.environ.get("SLUICE_CAPACITY_ALERT_WEBHOOK_URL", "")
SLUICE_CAPACITY_ALERT_EVERY_SECONDS = float(
    os.environ.get("SLUICE_CAPACITY_ALERT_EVERY_SECONDS", 30)
)

# The budget alert: a monthly budget whose month-end forecast (quotas/forecast.py) reaches
# one of these shares of it is posted once to the webhook, and once more when the projection
# falls MARGIN under that line again. Evaluated every EVERY_SECONDS by one worker.
SLUICE_BUDGET_ALERT_THRESHOLDS = tuple(
    sorted(
        float(share)
        for share in os.environ.get("SLUICE_BUDGET_ALERT_THRESHOLDS", "0.8,1.0").split(",")
        if share.strip()
    )
)
if any(not 0 < share <= 10 for share in SLUICE_BUDGET_ALERT_THRESHOLDS):
    raise ValueError("SLUICE_BUDGET_ALERT_THRESHOLDS: shares of the budget, e.g. 0.8,1.0")
SLUICE_BUDGET_ALERT_MARGIN = float(os.environ.get("SLUICE_BUDGET_ALERT_MARGIN", 0.05))
SLUICE_BUDGET_ALERT_EVERY_SECONDS = float(os.environ.get("SLUICE_BUDGET_ALERT_EVERY_SECONDS", 300))
# Unset: the capacity alert's webhook.
SLUICE_BUDGET_ALERT_WEBHOOK_URL = os.environ.get(
    "SLUICE_BUDGET_ALERT_WEBHOOK_URL", SLUICE_CAPACITY_ALERT_WEBHOOK_URL
)

# The Batch API (batches/): uploads may be larger than a proxied request; files are kept in
# Django's storage "batches" (a local folder unless STORAGES says otherwise).
SLUICE_BATCH_MAX_FILE_BYTES = int(os.environ.get("SLUICE_BATCH_MAX_FILE_BYTES", 200 * 1024 * 1024))
# Per application: the bytes its batch files (uploads and outputs) may take in storage, and
# how many uploaded files it may keep; an upload past either is refused (400).
SLUICE_BATCH_APP_MAX_BYTES = int(os.environ.get("SLUICE_BATCH_APP_MAX_BYTES", 1024**3))
SLUICE_BATCH_APP_MAX_FILES = int(os.environ.get("SLUICE_BATCH_APP_MAX_FILES", 100))
# A file's life when the upload names no `expires_after` (OpenAI's default for batch files,
# 30 days); output and error files live as long. 0: kept until deleted.
SLUICE_BATCH_FILE_EXPIRY_SECONDS = int(
    os.environ.get("SLUICE_BATCH_FILE_EXPIRY_SECONDS", 30 * 24 * 3600)
)
SLUICE_BATCH_MAX_LINES = int(os.environ.get("SLUICE_BATCH_MAX_LINES", 50_000))
SLUICE_BATCH_FILES_DIR = os.environ.get("SLUICE_BATCH_FILES_DIR", str(STATE_DIR / "batch-files"))
# A runner holds a claimed line this long, renewing it while the call runs; a runner that
# died (kill -9) lets its lines go when this runs out.
SLUICE_BATCH_LEASE_SECONDS = float(os.environ.get("SLUICE_BATCH_LEASE_SECONDS", 30))
# The share of its host's CPU a batch runner leaves idle, pacing its lines when the host is
# busier (batches/headroom.py); 0: lines start as the slots allow.
SLUICE_BATCH_CPU_HEADROOM = float(os.environ.get("SLUICE_BATCH_CPU_HEADROOM", 0.7))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "batches": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": SLUICE_BATCH_FILES_DIR, "file_permissions_mode": 0o600},
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("SLUICE_LOG_LEVEL", "INFO")},
}

# --- Management API (/api/v1/) ------------------------------------------------------------
# Throttles count in the "api" cache: Redis when REDIS_URL is set (shared by every worker).
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.authentication.ManagementTokenAuthentication",
        "api.authentication.ConsoleSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["api.permissions.HasRole"],
    "DEFAULT_THROTTLE_CLASSES": ["api.throttles.CallerThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "caller": os.environ.get("SLUICE_API_THROTTLE", "600/min"),
    },
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "api.pagination.Page",
    "UNAUTHENTICATED_USER": None,
    # OPTIONS answers 405: the schema at /api/v1/schema/ describes every endpoint.
    "DEFAULT_METADATA_CLASS": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Sluice management API",
    "DESCRIPTION": (
        "Teams, members, applications, keys, limits, deployments, config, usage and calls. "
        "Authenticate with a management token (`Authorization: Bearer sk-sluice-admin-…`) "
        "or the console session (with its CSRF token). Every error is "
        '`{"error": {"message", "type", "code", "param"}}`.'
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.errors.document_errors",
    ],
}
