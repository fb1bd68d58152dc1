"""docker-compose.yml and the Dockerfile, checked by reading them (Docker is not needed): every
service's image and command, healthchecks, dependency wiring on healthy services, Redis
durability, a single beat, the shared kubeconfig of the development cluster, no committed
secrets, and an image that runs as the non-root user the Kubernetes manifests expect."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.test_manifests import K8S

ROOT = K8S.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
APPS = ("migrate", "web", "worker", "webhook-worker", "observer", "beat")
LONG_RUNNING = (
    "postgres",
    "redis",
    "devcluster",
    "web",
    "worker",
    "webhook-worker",
    "observer",
    "beat",
)
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def command(name: str) -> str:
    value = SERVICES[name].get("command", "")
    return " ".join(value) if isinstance(value, list) else value


def healthcheck(name: str) -> str:
    test = SERVICES[name]["healthcheck"]["test"]
    assert test[0] in ("CMD", "CMD-SHELL")
    return " ".join(test[1:])


def test_the_stack_has_every_service():
    assert set(SERVICES) == {"postgres", "redis", "devcluster", *APPS}


def test_services_run_the_right_image_and_command():
    assert SERVICES["postgres"]["image"].startswith("postgres:")
    assert SERVICES["redis"]["image"].startswith("redis:")
    images = {SERVICES[name]["image"] for name in APPS}
    assert len(images) == 1
    for name in APPS:
        assert SERVICES[name]["build"] == "."
    # The development cluster: the app image plus the binaries the `kube` stage builds.
    assert SERVICES["devcluster"]["build"] == {"context": ".", "target": "devcluster"}
    assert re.search(r"^FROM app AS devcluster$", DOCKERFILE, re.MULTILINE)
    assert "COPY --from=kube /opt/kube/bin /opt/kube/bin" in DOCKERFILE
    assert "ENV DEVSTACK_KUBE_BIN=/opt/kube/bin" in DOCKERFILE
    # The app image is the last stage, the one `build: .` makes.
    assert re.findall(r"^FROM (\S+)", DOCKERFILE, re.MULTILINE)[-1] == "app"
    assert command("web").startswith("gunicorn controlplane.wsgi:application --bind=0.0.0.0:8000")
    assert command("worker").startswith("celery --app=controlplane worker")
    assert command("beat").startswith("celery --app=controlplane beat")
    assert command("observer") == "python manage.py observe"
    assert "--schedule=/tmp/" in command("beat")
    assert "python manage.py migrate --noinput" in command("migrate")
    assert command("devcluster").startswith("python -m devstack.cluster /var/lib/devcluster")
    assert "--host=devcluster" in command("devcluster")


def test_long_running_services_have_healthchecks_that_probe_the_right_thing():
    assert SERVICES["migrate"]["restart"] == "no"
    assert "healthcheck" not in SERVICES["migrate"]
    for name in LONG_RUNNING:
        assert SERVICES[name]["healthcheck"]["retries"] > 0
    assert "pg_isready" in healthcheck("postgres")
    assert "redis-cli ping" in healthcheck("redis")
    # The readiness probe: one SELECT, never rate-limited (the health API is, per address).
    assert "http://127.0.0.1:8000/readyz" in healthcheck("web")
    # `$$` is compose's escape for a literal `$`, so the shell sees `$(hostname)`.
    assert "inspect ping --destination=celery@$$(hostname)" in healthcheck("worker")
    assert "inspect ping --destination=celerybeat@$$(hostname)" in healthcheck("beat")
    assert "--enable-remote-control" in command("beat")
    port = re.search(r"--port=(\d+)", command("devcluster")).group(1)
    assert f"https://127.0.0.1:{port}/readyz" in healthcheck("devcluster")


def test_app_services_wait_for_healthy_backing_services_and_migrations():
    for name in APPS:
        depends = SERVICES[name]["depends_on"]
        for backing in ("postgres", "redis", "devcluster"):
            assert depends[backing] == {"condition": "service_healthy"}, (name, backing)
    for name in ("web", "worker", "observer", "beat"):
        migrate = SERVICES[name]["depends_on"]["migrate"]
        assert migrate == {"condition": "service_completed_successfully"}
    for name, service in SERVICES.items():
        for target, dependency in service.get("depends_on", {}).items():
            if dependency["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[target], (name, target)


def test_redis_keeps_every_broker_message():
    redis = command("redis")
    assert "--appendonly yes" in redis
    assert "--maxmemory-policy noeviction" in redis


def test_exactly_one_beat():
    beats = [name for name in SERVICES if re.search(r"\bcelery\b.* beat\b", command(name))]
    assert beats == ["beat"]
    assert SERVICES["beat"].get("deploy", {}).get("replicas", 1) == 1
    assert "scale" not in SERVICES["beat"]


def test_app_containers_reach_the_development_cluster_through_a_shared_kubeconfig():
    devcluster = command("devcluster")
    # The kubeconfig it writes names it by its service name, which its certificate names too.
    assert "--host=devcluster" in devcluster
    assert "--kubeconfig-out=/kube/config" in devcluster
    assert "kubeconfig:/kube" in SERVICES["devcluster"]["volumes"]
    for name in APPS:
        assert SERVICES[name]["environment"]["KUBECONFIG"] == "/kube/config"
        assert "kubeconfig:/kube:ro" in SERVICES[name]["volumes"]
    assert "kubeconfig" in COMPOSE["volumes"]


@pytest.mark.parametrize("name", [*APPS, "devcluster"])
def test_app_containers_run_as_locked_down_as_the_kubernetes_pods(name):
    service = SERVICES[name]
    assert service["read_only"] is True
    assert service["tmpfs"] == ["/tmp"]
    assert service["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in service["security_opt"]
    assert "user" not in service  # the image's own non-root user
    for port in service.get("ports", []):
        assert port.startswith("127.0.0.1:")


def test_no_secret_values_are_committed():
    required = re.compile(r"^\$\{(?P<name>[A-Z_]+):\?[^}]*\}$")
    for name, service in SERVICES.items():
        for key, value in service.get("environment", {}).items():
            if re.search(r"SECRET|PASSWORD|TOKEN", key):
                # Required from the environment, or optional with an empty default.
                assert required.match(value) or value == f"${{{key}:-}}", (name, key, value)
        url = service.get("environment", {}).get("DATABASE_URL")
        if url:
            assert re.match(r"^postgres://\w+:\$\{POSTGRES_PASSWORD:\?[^}]*\}@postgres:", url)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".env", ".git", ".venv", ".devdata"} <= set(ignored)


# What production mode (DJANGO_DEBUG off) refuses to start without (controlplane/settings.py).
REQUIRED_IN_PRODUCTION = ("DJANGO_SECRET_KEY", "ALLOWED_HOSTS", "METRICS_TOKEN")


def test_production_mode_gets_every_variable_it_requires():
    for name in APPS:
        environment = SERVICES[name]["environment"]
        assert environment["DJANGO_DEBUG"] == "0"
        assert set(REQUIRED_IN_PRODUCTION) <= set(environment), name
    assert SERVICES["web"]["environment"]["METRICS_TOKEN"].startswith("${METRICS_TOKEN:?")
    collectstatic = re.search(
        r"^RUN (DJANGO_DEBUG=0 .*?manage.py collectstatic)", DOCKERFILE, re.M | re.S
    )
    assert collectstatic, "the image's collectstatic runs in production mode"
    for name in REQUIRED_IN_PRODUCTION:
        assert f"{name}=" in collectstatic.group(1), name


def test_image_runs_as_the_numeric_non_root_user_of_the_kubernetes_pods():
    users = re.findall(r"^USER\s+(\S+)", DOCKERFILE, re.MULTILINE)
    assert users, "the Dockerfile never drops root"
    uid, _, gid = users[-1].partition(":")
    assert re.fullmatch(r"[1-9][0-9]*", uid), "USER must be a numeric, non-root uid"
    assert re.fullmatch(r"[1-9][0-9]*", gid), "USER must name a numeric, non-root gid"
    web = yaml.safe_load((K8S / "control-plane" / "web.yaml").read_text().split("\n---\n")[0])
    pod_context = web["spec"]["template"]["spec"]["securityContext"]
    assert (pod_context["runAsUser"], pod_context["runAsGroup"]) == (int(uid), int(gid))


def test_image_works_on_a_read_only_root_filesystem():
    assert "PYTHONDONTWRITEBYTECODE=1" in DOCKERFILE
    assert re.search(r"^ENV HOME=/tmp$", DOCKERFILE, re.MULTILINE)
    assert "manage.py collectstatic --noinput" in DOCKERFILE
    assert "python -m compileall" in DOCKERFILE
    cmd = re.search(r"^CMD (\[.*?\])$", DOCKERFILE, re.MULTILINE | re.DOTALL).group(1)
    assert "--no-control-socket" in cmd
    assert "--worker-tmp-dir=/tmp" in cmd
