"""Settings, read only from the environment (12-factor); production mode fails fast.

`DJANGO_DEBUG=1` is development mode, which supplies a throwaway secret key and local hosts.
With it off, `DJANGO_SECRET_KEY`, `ALLOWED_HOSTS` and `METRICS_TOKEN` must be set or the process
refuses to start.
"""

import ipaddress
import re
from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from controlplane.validation import positive_quantity

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

# Development mode (`make run` and `make test` turn it on). Off, the process refuses to start
# without DJANGO_SECRET_KEY, ALLOWED_HOSTS and METRICS_TOKEN.
DEBUG = env.bool("DJANGO_DEBUG", default=False)

# Django's signing key and the host names web answers (on a real cluster: your public host
# first, and localhost, which the probes send); required when DJANGO_DEBUG is off.
if DEBUG:
    SECRET_KEY = env.str(
        "DJANGO_SECRET_KEY", default="insecure-development-key-never-in-production"
    )
    ALLOWED_HOSTS = env.list(
        "ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"]
    )
else:
    missing = [
        name
        for name in ("DJANGO_SECRET_KEY", "ALLOWED_HOSTS", "METRICS_TOKEN")
        if not env.str(name, "")
    ]
    if missing:
        raise ImproperlyConfigured(
            f"Production mode (DJANGO_DEBUG off) needs {', '.join(missing)} in the environment."
        )
    SECRET_KEY = env.str("DJANGO_SECRET_KEY")
    ALLOWED_HOSTS = env.list("ALLOWED_HOSTS")

# Origins of the admin and the dashboard behind TLS, e.g. https://gpu.example.com.
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "django_htmx",
    "axes",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "controlplane",
    "tenancy",
    "catalog",
    "inventory",
    "billing",
    "runtime",
    "dashboard",
]

MIDDLEWARE = [
    # First, so every answer names its request (X-Request-ID), refusals below included.
    "controlplane.request_id.RequestIdMiddleware",
    "controlplane.api.middleware.MetricsMiddleware",
    "controlplane.api.middleware.ApiMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "controlplane.api.middleware.ApiEnvelopeMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # Before CSRF, so a refused POST is not read; static files (WhiteNoise) never reach it.
    "dashboard.ratelimit.DashboardRateLimitMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # Every write by a known actor (an API key, a signed-in user), once answered: it reads the
    # user and the messages a page queued, so it comes after both.
    "tenancy.audit.AuditMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a lockout into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
WSGI_APPLICATION = "controlplane.wsgi.application"

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
        },
    },
]

# PostgreSQL, e.g. postgres://user:pass@host:5432/db (`make run` and `make test` start an
# embedded one and set it); DB_CONN_MAX_AGE: seconds a connection is kept between requests.
if not env.str("DATABASE_URL", default=""):
    raise ImproperlyConfigured(
        "DATABASE_URL is not set. `make run` and `make test` start an embedded PostgreSQL "
        "and set it for you; otherwise point it at a PostgreSQL server."
    )
DATABASES = {"default": env.db_url("DATABASE_URL")}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# The hand-written statements of hot paths (runtime/orders.py) are prepared on the server once
# per connection. Turn off behind a pooler in transaction mode that cannot keep them (PgBouncer
# before 1.21, or without max_prepared_statements).
DB_PREPARED_STATEMENTS = env.bool("DB_PREPARED_STATEMENTS", default=True)
if DB_PREPARED_STATEMENTS:
    # psycopg prepares nothing when this is None (Django's default). Django's own cursors bind
    # on the client and never prepare; only statements asked to (controlplane.statements.cursor)
    # are, so the automatic threshold is set out of reach.
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 2**31 - 1
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis: the Celery broker, the rate limiters and the log-follower slots (`make run` and `make
# test` start an embedded one and set it).
REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")

# The browser dashboard signs people in with Django auth; the API uses keys instead.
LOGIN_URL = "dashboard:login"
LOGIN_REDIRECT_URL = "dashboard:overview"
LOGOUT_REDIRECT_URL = "dashboard:login"

# Logins to the dashboard and the admin are throttled by django-axes: after LOGIN_FAILURE_LIMIT
# wrong passwords for one account from one client address, or from one address for any accounts,
# that pair (or address) is refused (a 429 page that says why and for how long) for
# LOGIN_LOCKOUT_MINUTES. Never the account alone: whoever guesses from one address would lock its
# owner out everywhere. Refused attempts are not counted, so they cannot prolong a lock; an
# account is locked for every address only by an operator (`manage.py lock_account`, which clears
# the user's is_active). Attempts are rows in the database, where ops see them (admin: Axes) and
# lift a lock by deleting them or with `manage.py axes_reset_username`/`axes_reset_ip`.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.float("LOGIN_LOCKOUT_MINUTES", default=15.0))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_HTTP_RESPONSE_CODE = 429
AXES_LOCKOUT_CALLABLE = "tenancy.login.lockout_response"
# An IPv6 client counts as its /64 (controlplane.ratelimit.client_network).
AXES_CLIENT_IP_CALLABLE = "controlplane.ratelimit.client_network"
# Proxies in front of web that append to X-Forwarded-For (production sits behind an ingress, as
# SECURE_PROXY_SSL_HEADER assumes); without them every client would share the proxy's address.
# The per-address rate limits below count against the same address. A hop is believed only
# from an address in LOGIN_PROXY_NETWORKS (where the ingress's pods or the load balancer
# connect from): a client reaching web from anywhere else is its connection's address.
LOGIN_TRUSTED_PROXIES = env.int("LOGIN_TRUSTED_PROXIES", default=0 if DEBUG else 1)
# (LOGIN_PROXY_NETWORKS is read below, with the other networks.)
# Successful logins are not logged to the database (AccessLog would grow without bound).
AXES_DISABLE_ACCESS_LOG = True

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
# Serve static files straight from the apps in development, so no collectstatic is needed.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

# Behind TLS (DJANGO_DEBUG off): plain HTTP is redirected to https (TLS ends at the ingress,
# which sets X-Forwarded-Proto), and browsers are told to keep to https this many seconds.
if not DEBUG:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=60 * 60 * 24 * 30)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["controlplane.api.renderers.EnvelopeJSONRenderer"],
    # JSON everywhere; a PATCH takes a JSON merge patch as well (its view adds the parser), so
    # each operation accepts, and documents, only what it reads.
    "DEFAULT_PARSER_CLASSES": ["controlplane.api.parsers.StrictJSONParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": ["tenancy.auth.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["tenancy.permissions.IsTenant"],
    "EXCEPTION_HANDLER": "controlplane.api.exceptions.envelope_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_THROTTLE_CLASSES": ["tenancy.throttling.ApiKeyRateThrottle"],
}


def _rate(name: str, default: str) -> str:
    """A request rate, "<count>/<s|min|hour|day>"; anything else stops the process."""
    value = env.str(name, default=default).strip()
    if not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", value):
        raise ImproperlyConfigured(
            f"{name}: {value!r} is not a rate; write requests per s, min, hour or day (60/min)"
        )
    return value


# Requests per API key (all web processes together, counted in the Redis cache).
API_THROTTLE_RATE = _rate("API_THROTTLE_RATE", "1200/min")
# Requests per client address (LOGIN_TRUSTED_PROXIES; an IPv6 client is its /64), counted the
# same way: GET /api/v1/health (each report makes a cluster call; Kubernetes probes /readyz,
# which is never limited) and the dashboard's pages, its login page included (static files
# and the admin are not counted).
HEALTH_RATE_PER_ADDRESS = _rate("HEALTH_RATE_PER_ADDRESS", "120/min")
DASHBOARD_RATE_PER_ADDRESS = _rate("DASHBOARD_RATE_PER_ADDRESS", "600/min")
# Bodies of API requests are small JSON documents; anything bigger is refused with 413.
API_MAX_BODY_BYTES = env.int("API_MAX_BODY_BYTES", default=64 * 1024)
# Active API keys a customer may hold when making its own on the dashboard's API keys page
# (ops minting one in the admin or with create_tenant are not held to it).
API_KEYS_PER_TENANT = env.int("API_KEYS_PER_TENANT", default=20)
# SSH keys one tenant may register (each is written into every SSH unit's ConfigMap).
SSH_KEYS_PER_TENANT = env.int("SSH_KEYS_PER_TENANT", default=32)
# Secrets one tenant may hold (/secrets, each a Kubernetes Secret in its namespace): one more
# is 409 limit_exceeded. A secret's keys and values together are at most 1 MiB, the API
# server's own limit, so POST /secrets takes bodies up to SECRET_MAX_BODY_BYTES (JSON
# escaping of the values included); every other API body stays under API_MAX_BODY_BYTES.
SECRETS_PER_TENANT = env.int("SECRETS_PER_TENANT", default=64)
SECRET_MAX_BYTES = 1024 * 1024
SECRET_MAX_BODY_BYTES = 2 * SECRET_MAX_BYTES + 64 * 1024
# StorageClasses tenants may name for a storage (empty: none, the cluster's default is used).
STORAGE_CLASSES = [c.strip() for c in env.list("STORAGE_CLASSES", default=[]) if c.strip()]
# NodePorts and LoadBalancer Services one tenant's live units may hold (a stopped unit keeps
# its Services): an order past either is 409 limit_exceeded; both are in its ResourceQuota too.
NODE_PORTS_PER_TENANT = env.int("NODE_PORTS_PER_TENANT", default=32)
LOAD_BALANCERS_PER_TENANT = env.int("LOAD_BALANCERS_PER_TENANT", default=8)


def _quantity(name: str, default: str) -> str:
    """A positive whole-byte Kubernetes quantity; anything else stops the process."""
    value = env.str(name, default=default).strip()
    if problem := positive_quantity(value, resource="ephemeral-storage"):
        raise ImproperlyConfigured(f"{name}: {problem}")
    return value


# Ephemeral storage (container writable layer, logs, emptyDirs on disk) of a unit whose
# package names none. What one tenant's pods may have in all is the tenant's
# `quota_ephemeral_storage` (its ResourceQuota), like its CPU and memory.
PACKAGE_EPHEMERAL_STORAGE = _quantity("PACKAGE_EPHEMERAL_STORAGE", "20Gi")
DATA_UPLOAD_MAX_MEMORY_SIZE = max(API_MAX_BODY_BYTES, SECRET_MAX_BODY_BYTES, 2_621_440)

# The Redis of the rate limiters and other shared counters (default: REDIS_URL).
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": env.str("CACHE_URL", default=REDIS_URL),
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
    }
}

SPECTACULAR_SETTINGS = {
    "TITLE": "GPU control plane API",
    "DESCRIPTION": "Sell GPU runtime capacity as packages on Kubernetes with DRA.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "controlplane.api.schema.add_common_errors",
        "controlplane.api.schema.name_operations",
    ],
}

# Celery: at-least-once delivery; a task is acknowledged only after it ran, and a task whose
# worker died is redelivered. Tasks are idempotent by design (create-or-adopt).
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=60)
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=90)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Fail fast when the broker is down, so an API request is not held hostage by a publish.
# A message a dead worker had taken is redelivered after visibility_timeout (longer than any
# task's time limit); the operation sweeper usually re-sends it sooner.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_connect_timeout": 2,
    "socket_timeout": 5,
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=300),
}
CELERY_BROKER_CONNECTION_TIMEOUT = 2
# Celery's Django fix-up closes every database connection before and after each task unless
# this is set (celery PR #9824 reverted honouring CONN_MAX_AGE; so does the 5.7.0 pinned
# here), so each task paid for a new PostgreSQL backend. Set, the fix-up closes them only
# every this many tasks, and controlplane/celery.py gives tasks what Django gives requests:
# a connection lives DB_CONN_MAX_AGE and is health-checked before it is reused.
CELERY_DB_REUSE_MAX = 1000

# The root log level (LOG_LEVEL).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}

# Prometheus metrics: /metrics on web (a bearer token when METRICS_TOKEN is set, which
# production mode requires above), and on these ports for the Celery worker and the observer
# (0: not served; in k8s/ a NetworkPolicy admits only the monitoring namespace to them).
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
WORKER_METRICS_PORT = env.int("WORKER_METRICS_PORT", default=0)
OBSERVER_METRICS_PORT = env.int("OBSERVER_METRICS_PORT", default=0)

# Beat runs the heartbeat; the worker's last heartbeat shows in /api/v1/health.
HEARTBEAT_INTERVAL_SECONDS = env.int("HEARTBEAT_INTERVAL_SECONDS", default=15)

# Kubernetes: KUBECONFIG (a path) or, inside a pod, the service account. `make run` and the
# tests point it at a development cluster (devstack/cluster.py).
KUBECONFIG = env.str("KUBECONFIG", default="")
KUBE_CONTEXT = env.str("KUBE_CONTEXT", default="")
KUBE_REQUEST_TIMEOUT = env.float("KUBE_REQUEST_TIMEOUT", default=10.0)
HEALTH_CLUSTER_TIMEOUT = env.float("HEALTH_CLUSTER_TIMEOUT", default=2.0)
# The cluster registry (admin: Clusters; `manage.py import_clusters`). With no cluster
# registered, the cluster above stands in under this name, in this region (and `migrate`
# registers it so). A cluster whose listing fails for CLUSTER_LOST_AFTER_SECONDS after its last
# success is unreachable: no new unit is placed there.
CLUSTER_NAME = env.str("CLUSTER_NAME", default="default")
CLUSTER_REGION = env.str("CLUSTER_REGION", default="default")
CLUSTER_LOST_AFTER_SECONDS = env.int("CLUSTER_LOST_AFTER_SECONDS", default=120)
# Where this process finds the other clusters' kubeconfigs: a registered cluster names a file
# in it (kubeconfig-<cluster>), never a path. Each process mounts its own directory, holding
# its own ServiceAccount's tokens (k8s/components/multicluster; make run: .devdata/credentials/).
CLUSTER_CREDENTIALS_DIR = env.str(
    "CLUSTER_CREDENTIALS_DIR", default="/etc/controlplane/kubeconfigs"
)

# Create and label each tenant's namespace (needs namespace rights: k8s/components/
# tenant-provisioning). Off: an admin creates namespaces; a missing one fails the unit.
TENANT_NAMESPACE_PROVISIONING = env.bool("TENANT_NAMESPACE_PROVISIONING", default=True)

# Runtime: how often beat reconciles every unit (the backstop behind the observer) and sweeps
# operations, and when to give up.
RECONCILE_INTERVAL_SECONDS = env.float("RECONCILE_INTERVAL_SECONDS", default=30.0)
# Units per backstop tick (by pk, from a cursor shared in the cache), so a tick's cost follows
# the page, not the fleet (under 0.5 s at 500: bench/observer_cost.py). Every unit is visited
# within ceil(units / RECONCILE_PAGE_SIZE) ticks: at 10,000 units, 20 ticks of 30 s (10 min).
RECONCILE_PAGE_SIZE = env.int("RECONCILE_PAGE_SIZE", default=500)
SWEEP_INTERVAL_SECONDS = env.float("SWEEP_INTERVAL_SECONDS", default=30.0)
OPERATION_STALE_SECONDS = env.float("OPERATION_STALE_SECONDS", default=60.0)
OPERATION_MAX_ATTEMPTS = env.int("OPERATION_MAX_ATTEMPTS", default=20)
# How often beat stops the units whose stopAfter has run out (they stop at most this late).
AUTO_STOP_INTERVAL_SECONDS = env.float("AUTO_STOP_INTERVAL_SECONDS", default=15.0)
# A unit whose pod holds allocated devices this long without any container started (an image
# that never pulls) is stopped by the same pass, its devices back in the pool; never billed.
START_DEADLINE_SECONDS = env.float("START_DEADLINE_SECONDS", default=600.0)
# Preemption (ARCHITECTURE §22): how often beat looks for on-demand units waiting for devices
# interruptible units hold, and how long one waits before they are told to give way.
PREEMPTION_INTERVAL_SECONDS = env.float("PREEMPTION_INTERVAL_SECONDS", default=5.0)
PREEMPTION_WAIT_SECONDS = env.float("PREEMPTION_WAIT_SECONDS", default=10.0)
# How long devices handed over to a waiting unit stay kept for it alone (from its victims'
# preemptAt; more than their termination grace) before they go back to everyone.
HANDOVER_TIMEOUT_SECONDS = env.float("HANDOVER_TIMEOUT_SECONDS", default=900.0)
# Reservations (ARCHITECTURE §22): how often beat starts and ends them and keeps their
# placeholders, the most units' worth one may hold, and its longest window.
RESERVATION_INTERVAL_SECONDS = env.float("RESERVATION_INTERVAL_SECONDS", default=5.0)
RESERVATION_MAX_COUNT = env.int("RESERVATION_MAX_COUNT", default=32)
RESERVATION_MAX_DAYS = env.int("RESERVATION_MAX_DAYS", default=90)
# How many reservations (scheduled or active) one tenant may hold at once.
RESERVATIONS_PER_TENANT = env.int("RESERVATIONS_PER_TENANT", default=10)
# The placeholder pod that holds a reservation's devices: it runs nothing (pause).
RESERVATION_PLACEHOLDER_IMAGE = env.str(
    "RESERVATION_PLACEHOLDER_IMAGE", default="registry.k8s.io/pause:3.10"
)
# Billing (billing/): the one currency prices are in (ISO 4217), how often beat writes the
# whole hours running units have used to the ledger, and the Stripe meter event names
# (`<prefix><package ID>`) of the Stripe export.
BILLING_CURRENCY = env.str("BILLING_CURRENCY", default="USD").upper()
BILLING_SEAL_INTERVAL_SECONDS = env.float("BILLING_SEAL_INTERVAL_SECONDS", default=60.0)
# How often beat checks budgets: alerts, and stops once an enforced budget's grace has passed.
BUDGET_CHECK_INTERVAL_SECONDS = env.float("BUDGET_CHECK_INTERVAL_SECONDS", default=60.0)
# How often beat audits the last day's usage (controlplane_usage_audit_differences).
USAGE_AUDIT_INTERVAL_SECONDS = env.float("USAGE_AUDIT_INTERVAL_SECONDS", default=3600.0)
BILLING_STRIPE_EVENT_PREFIX = env.str("BILLING_STRIPE_EVENT_PREFIX", default="gpu_")
# Usage exports (billing.jobs): how long a finished export stays downloadable, and the longest
# a worker may spend on one.
BILLING_EXPORT_RETENTION_HOURS = env.float("BILLING_EXPORT_RETENTION_HOURS", default=168.0)
BILLING_EXPORT_TIME_LIMIT_SECONDS = env.int("BILLING_EXPORT_TIME_LIMIT_SECONDS", default=3600)
# Registries customers may pull from (e.g. "docker.io,ghcr.io"); empty allows any.
IMAGE_REGISTRY_ALLOWLIST = env.list("IMAGE_REGISTRY_ALLOWLIST", default=[])

# Reaching units (runtime/access.py): unit hostnames are <unit>-<tenant>-<hash>.ACCESS_DOMAIN,
# routed by an HTTPRoute from ACCESS_GATEWAY ("<namespace>/<name>") or else an Ingress of
# ACCESS_INGRESS_CLASS; with neither (or no domain) HTTP units have in-cluster URLs only. A
# unit reached over tcp gets a Service of ACCESS_TCP_SERVICE_TYPE (NodePort, LoadBalancer, or
# ClusterIP: not exposed), its NodePort shown on ACCESS_TCP_HOST.
ACCESS_DOMAIN = env.str("ACCESS_DOMAIN", default="")
ACCESS_GATEWAY = env.str("ACCESS_GATEWAY", default="")
ACCESS_INGRESS_CLASS = env.str("ACCESS_INGRESS_CLASS", default="")
ACCESS_PUBLIC_SCHEME = env.str("ACCESS_PUBLIC_SCHEME", default="https")
ACCESS_TCP_SERVICE_TYPE = env.str("ACCESS_TCP_SERVICE_TYPE", default="NodePort")
ACCESS_TCP_HOST = env.str("ACCESS_TCP_HOST", default="")
# Tenant network isolation (NetworkPolicies in every tenant namespace): ingress from the
# gateway's namespace (NETWORK_GATEWAY_NAMESPACE, default the ACCESS_GATEWAY's), egress to DNS
# and public addresses plus NETWORK_EGRESS_ALLOW (CIDRs, e.g. an internal registry).
NETWORK_POLICIES = env.bool("NETWORK_POLICIES", default=True)
NETWORK_GATEWAY_NAMESPACE = env.str(
    "NETWORK_GATEWAY_NAMESPACE", default=ACCESS_GATEWAY.partition("/")[0]
)


def _networks(name: str, *, may_be_everything: bool = True, default: str = "") -> list[str]:
    """A comma-separated list of IPv4 and IPv6 networks, each in canonical form; an entry that
    is not one stops the process, naming the variable and the entry."""
    networks = []
    for entry in filter(
        None, (entry.strip() for entry in env.list(name, default=default.split(",")))
    ):
        try:
            network = ipaddress.ip_network(entry)
        except ValueError as error:
            raise ImproperlyConfigured(
                f"{name}: {entry!r} is not a network ({error}); write CIDRs separated by "
                "commas, e.g. 10.244.0.0/16,fd00:10:244::/56"
            ) from None
        if network.prefixlen == 0 and not may_be_everything:
            raise ImproperlyConfigured(
                f"{name}: {entry!r} is every address; name the cluster's own ranges"
            )
        networks.append(str(network))
    return networks


# CIDRs (IPv4 or IPv6) units may reach besides public addresses, e.g. an internal registry
# 10.20.0.0/16; checked at start.
NETWORK_EGRESS_ALLOW = _networks("NETWORK_EGRESS_ALLOW")
# Where the proxies LOGIN_TRUSTED_PROXIES counts connect from (above): the private ranges an
# ingress's pods or a load balancer use, unless set.
LOGIN_PROXY_NETWORKS = _networks(
    "LOGIN_PROXY_NETWORKS",
    default="10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,127.0.0.0/8,fc00::/7,::1/128",
)
# The cluster's own ranges, IPv4 and IPv6 (kube-controller-manager's --cluster-cidr and
# --service-cluster-ip-range, the nodes' subnets): no rule meaning "the internet" reaches them,
# whether they are private or not. Private, shared, link-local and other never-public ranges are
# always left out (runtime/manifests.py); on a cluster whose ranges are all among those these
# may stay empty.
CLUSTER_POD_CIDRS = _networks("CLUSTER_POD_CIDRS", may_be_everything=False)
CLUSTER_SERVICE_CIDRS = _networks("CLUSTER_SERVICE_CIDRS", may_be_everything=False)
CLUSTER_NODE_CIDRS = _networks("CLUSTER_NODE_CIDRS", may_be_everything=False)
# Webhooks (tenancy/webhooks.py): targets must be public addresses; ops may allow ranges
# (e.g. 10.20.0.0/16 for an in-house receiver). Link-local addresses (cloud metadata) and the
# cluster's own ranges above are refused even inside an allowed range.
WEBHOOK_ALLOWED_NETWORKS = _networks("WEBHOOK_ALLOWED_NETWORKS")
WEBHOOKS_PER_TENANT = env.int("WEBHOOKS_PER_TENANT", default=16)
WEBHOOK_TIMEOUT_SECONDS = env.float("WEBHOOK_TIMEOUT_SECONDS", default=10.0)
# A webhook URL's name is asked of the name servers for at most this long (creating or
# changing a webhook, in a web thread, and before each delivery); WEBHOOK_DNS_SERVERS
# ("host" or "host:port", comma-separated) instead of the system's resolv.conf.
WEBHOOK_DNS_TIMEOUT_SECONDS = env.float("WEBHOOK_DNS_TIMEOUT_SECONDS", default=2.0)
WEBHOOK_DNS_SERVERS = env.list("WEBHOOK_DNS_SERVERS", default=[])
# Retries back off from the first delay, tripling each time up to the cap, for RETRY_FOR.
WEBHOOK_RETRY_FIRST_SECONDS = env.float("WEBHOOK_RETRY_FIRST_SECONDS", default=5.0)
WEBHOOK_RETRY_MAX_SECONDS = env.float("WEBHOOK_RETRY_MAX_SECONDS", default=6 * 3600.0)
WEBHOOK_RETRY_FOR_SECONDS = env.float("WEBHOOK_RETRY_FOR_SECONDS", default=24 * 3600.0)
# ... and at most this many attempts, however each ended (one whose worker stopped counts).
WEBHOOK_MAX_ATTEMPTS = env.int("WEBHOOK_MAX_ATTEMPTS", default=15)
# After a rotation the previous secret signs beside the new one for this long.
WEBHOOK_SECRET_OVERLAP_SECONDS = env.float("WEBHOOK_SECRET_OVERLAP_SECONDS", default=24 * 3600.0)
WEBHOOK_DELIVERY_RETENTION_DAYS = env.int("WEBHOOK_DELIVERY_RETENTION_DAYS", default=30)
# Whole months of the audit log `manage.py prune_audit` keeps before this one (its partitions).
AUDIT_RETENTION_MONTHS = env.int("AUDIT_RETENTION_MONTHS", default=24)
# The CloudEvents `source` of the events webhooks carry.
WEBHOOK_EVENT_SOURCE = env.str("WEBHOOK_EVENT_SOURCE", default="/api/v1")
# SSH into units: the sidecar's image runs sshd as a non-root user on port 2222, trusting the
# keys in /etc/ssh-keys/authorized_keys (docs/ssh-server/Dockerfile builds one); the session
# user is SSH_USERNAME; clients connect to the unit's ssh Service on ACCESS_TCP_HOST.
SSH_SERVER_IMAGE = env.str("SSH_SERVER_IMAGE", default="ghcr.io/example/gpu-unit-sshd:1")
SSH_USERNAME = env.str("SSH_USERNAME", default="runtime")
# GET /gpu-units/{name}/logs: a followed log ends after this long, or after this many bytes,
# whatever the cluster sends; a log read at once is cut at LOGS_MAX_BYTES.
LOGS_FOLLOW_SECONDS = env.float("LOGS_FOLLOW_SECONDS", default=60.0)
LOGS_FOLLOW_MAX_BYTES = env.int("LOGS_FOLLOW_MAX_BYTES", default=8 * 1024 * 1024)
LOGS_MAX_BYTES = env.int("LOGS_MAX_BYTES", default=1024 * 1024)
# A followed log holds a web thread while it lasts. Followers open at once: per tenant and in
# total (across every web process, counted in Redis), and per web process at most half its
# threads, so the other half always serves other requests (429 `throttled` beyond any cap).
# WEB_THREADS is gunicorn's --threads; gunicorn.conf.py sets it from the running server.
LOGS_FOLLOWERS_PER_TENANT = env.int("LOGS_FOLLOWERS_PER_TENANT", default=4)
LOGS_FOLLOWERS_TOTAL = env.int("LOGS_FOLLOWERS_TOTAL", default=16)
WEB_THREADS = env.int("WEB_THREADS", default=4)
LOGS_FOLLOWERS_PER_PROCESS = env.int("LOGS_FOLLOWERS_PER_PROCESS", default=WEB_THREADS // 2)
if LOGS_FOLLOWERS_PER_PROCESS >= WEB_THREADS:
    raise ImproperlyConfigured(
        f"LOGS_FOLLOWERS_PER_PROCESS ({LOGS_FOLLOWERS_PER_PROCESS}) must be below WEB_THREADS "
        f"({WEB_THREADS}): followers would take every thread of a web process."
    )

# Inventory: how often beat mirrors the cluster's DRA state in full (the backstop behind the
# observer), and when the mirror counts as stale.
INVENTORY_SYNC_INTERVAL_SECONDS = env.float("INVENTORY_SYNC_INTERVAL_SECONDS", default=30.0)
INVENTORY_STALE_AFTER_SECONDS = env.float("INVENTORY_STALE_AFTER_SECONDS", default=90.0)

# The observer (`manage.py observe`): events are taken in batches this wide; the inventory
# mirror is recomputed from the watches at most this often; without changes the mirror's time
# is moved on this often; status for health is published this often and lives this long.
OBSERVER_BATCH_SECONDS = env.float("OBSERVER_BATCH_SECONDS", default=0.005)
OBSERVER_INVENTORY_SECONDS = env.float("OBSERVER_INVENTORY_SECONDS", default=1.0)
OBSERVER_TOUCH_SECONDS = env.float("OBSERVER_TOUCH_SECONDS", default=10.0)
OBSERVER_STATUS_SECONDS = env.float("OBSERVER_STATUS_SECONDS", default=1.0)
OBSERVER_STATUS_TTL_SECONDS = env.int("OBSERVER_STATUS_TTL_SECONDS", default=10)
OBSERVER_WATCH_TIMEOUT_SECONDS = env.int("OBSERVER_WATCH_TIMEOUT_SECONDS", default=300)
# A replica without the lead tries to take it this often.
OBSERVER_LEAD_RETRY_SECONDS = env.float("OBSERVER_LEAD_RETRY_SECONDS", default=2.0)
# Events about a unit whose row does not yet have its objects (its provisioning is still
# recording them) are looked at again with backoff for this long; then the backstop has it.
OBSERVER_RETRY_GIVE_UP_SECONDS = env.float("OBSERVER_RETRY_GIVE_UP_SECONDS", default=30.0)
