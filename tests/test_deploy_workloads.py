"""The control plane's own workloads in k8s/control-plane: replicas and rollout strategy,
probes, resources, restricted security contexts, and configuration from a ConfigMap plus a
Secret reference. Read from the source files, so these run without kubectl."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.test_manifests import K8S

CONTROL_PLANE = K8S / "control-plane"
NAMESPACE = "gpu-control-plane"
SECRET = "gpu-control-plane-secrets"
SECRET_KEYS = {"DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL", "METRICS_TOKEN"}
CONFIGMAP = "gpu-control-plane-config"
SETTINGS = (K8S.parent / "controlplane" / "settings.py").read_text()


def _objects() -> dict[tuple[str, str], dict]:
    spec = yaml.safe_load((CONTROL_PLANE / "kustomization.yaml").read_text())
    found = {}
    for resource in spec["resources"]:
        for doc in yaml.safe_load_all((CONTROL_PLANE / resource).read_text()):
            found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


OBJECTS = _objects()
WORKLOADS = {name: obj for (kind, name), obj in OBJECTS.items() if kind in ("Deployment", "Job")}
CONFIG = OBJECTS[("ConfigMap", CONFIGMAP)]["data"]


def _pod(name: str) -> dict:
    return WORKLOADS[name]["spec"]["template"]["spec"]


def _containers(name: str) -> list[dict]:
    pod = _pod(name)
    return pod.get("initContainers", []) + pod["containers"]


def test_everything_lives_in_the_control_plane_namespace():
    namespaced = [obj for (kind, _), obj in OBJECTS.items() if kind != "Namespace"]
    cluster_scoped = {
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for obj in namespaced:
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]["name"]
    labels = OBJECTS[("Namespace", NAMESPACE)]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_web_scales_out_and_beat_is_a_singleton_that_never_overlaps():
    assert WORKLOADS["web"]["spec"]["replicas"] >= 2
    assert WORKLOADS["worker"]["spec"]["replicas"] >= 1
    # Observers take turns on one lead: a second replica only stands by.
    assert WORKLOADS["observer"]["spec"]["replicas"] == 2
    beat = WORKLOADS["beat"]["spec"]
    assert beat["replicas"] == 1
    assert beat["strategy"] == {"type": "Recreate"}
    commands = {
        name: " ".join(c["command"]) for name in WORKLOADS for c in _pod(name)["containers"]
    }
    assert commands["web"].startswith("gunicorn controlplane.wsgi:application")
    assert re.search(r"^celery --app=controlplane worker\b", commands["worker"])
    assert re.search(r"^celery --app=controlplane beat\b", commands["beat"])
    assert commands["migrate"] == "python manage.py migrate --noinput"
    assert [name for name, command in commands.items() if " beat" in command] == ["beat"]


def test_web_readiness_is_the_database_check_and_liveness_does_not_touch_the_database():
    (web,) = _pod("web")["containers"]
    readiness, liveness = web["readinessProbe"]["httpGet"], web["livenessProbe"]["httpGet"]
    # Not /api/v1/health: that one is rate-limited per address (test_health_rate_limit.py).
    assert readiness["path"] == "/readyz"
    assert liveness["path"].startswith("/static/")
    assert web["startupProbe"]["httpGet"]["path"] == liveness["path"]
    allowed_hosts = CONFIG["ALLOWED_HOSTS"].split(",")
    for probe in (readiness, liveness):
        headers = {h["name"]: h["value"] for h in probe["httpHeaders"]}
        # Django answers 400 to the pod IP as Host, and 301 to plain http with SSL redirect on.
        assert headers["Host"] in allowed_hosts
        assert headers["X-Forwarded-Proto"] == "https"
        assert probe["port"] == web["ports"][0]["name"]


@pytest.mark.parametrize(("name", "node"), [("worker", "celery@"), ("beat", "celerybeat@")])
def test_celery_processes_are_probed_by_pinging_their_own_node(name, node):
    (container,) = _pod(name)["containers"]
    probe = " ".join(container["livenessProbe"]["exec"]["command"])
    assert f"inspect ping --destination={node}$(hostname)" in probe
    if name == "beat":
        assert "--enable-remote-control" in container["command"]


def test_the_metrics_service_reaches_the_worker_and_observer_ports():
    service = OBJECTS[("Service", "metrics")]["spec"]
    assert service["clusterIP"] == "None"
    (port,) = service["ports"]
    for name in ("worker", "observer"):
        pod_labels = WORKLOADS[name]["spec"]["template"]["metadata"]["labels"]
        assert service["selector"].items() <= pod_labels.items()
        ports = {p["name"] for c in _pod(name)["containers"] for p in c.get("ports", [])}
        assert port["targetPort"] in ports


def test_the_service_routes_to_web_pods():
    service = OBJECTS[("Service", "web")]["spec"]
    web = WORKLOADS["web"]["spec"]
    assert service["selector"] == web["selector"]["matchLabels"]
    assert service["selector"].items() <= web["template"]["metadata"]["labels"].items()
    (port,) = service["ports"]
    assert port["targetPort"] == web["template"]["spec"]["containers"][0]["ports"][0]["name"]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_pods_run_restricted_with_a_read_only_root_and_a_tmp_volume(name):
    pod = _pod(name)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] >= 1000
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for container in _containers(name):
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert "privileged" not in context
        mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
        assert "/tmp" in mounts
        # Writable places are emptyDirs: /tmp, and the metrics directory of forking servers.
        assert set(mounts) <= {"/tmp", "/var/run/metrics"}
        for volume in mounts.values():
            assert "emptyDir" in volumes[volume]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_containers_have_requests_and_limits(name):
    for container in _containers(name):
        resources = container["resources"]
        assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}


# Set per Deployment, not shared through the ConfigMap: each process type has its own metrics
# port, and forking servers their own PROMETHEUS_MULTIPROC_DIR (read by prometheus_client at
# import, so it must be in the environment, and each must be a directory the pod mounts).
PER_PROCESS = {"WORKER_METRICS_PORT", "OBSERVER_METRICS_PORT", "PROMETHEUS_MULTIPROC_DIR"}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_configuration_comes_from_the_configmap_and_secrets_by_reference(name):
    for container in _containers(name):
        assert container["envFrom"] == [{"configMapRef": {"name": CONFIGMAP}}]
        secret_refs = {}
        for variable in container["env"]:
            if variable["name"] in PER_PROCESS:
                assert "valueFrom" not in variable
                continue
            assert "value" not in variable, f"literal value for {variable['name']}"
            ref = variable["valueFrom"]["secretKeyRef"]
            assert ref["name"] == SECRET
            secret_refs[variable["name"]] = ref["key"]
        assert secret_refs == {key: key for key in SECRET_KEYS}


def test_configmap_holds_only_settings_the_app_reads_and_no_secrets():
    for key in CONFIG:
        assert re.search(rf"""["']{key}["']""", SETTINGS), f"{key} is not read by settings.py"
    assert not SECRET_KEYS & set(CONFIG)
    assert CONFIG["DJANGO_DEBUG"] == "0"


def test_per_process_settings_are_read_and_the_metrics_directory_mounted():
    for name in WORKLOADS:
        for container in _containers(name):
            for variable in container.get("env", []):
                if variable["name"] == "PROMETHEUS_MULTIPROC_DIR":
                    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
                    assert variable["value"] in mounts, (name, container["name"])
                elif variable["name"] in PER_PROCESS:
                    assert re.search(rf"""["']{variable["name"]}["']""", SETTINGS)


def test_only_the_worker_and_observer_run_as_the_service_account_with_unit_rights():
    for name in ("gpu-control-plane", "gpu-control-plane-unprivileged"):
        assert OBJECTS[("ServiceAccount", name)]["automountServiceAccountToken"] is False
    accounts = {name: _pod(name)["serviceAccountName"] for name in WORKLOADS}
    assert accounts == {
        "worker": "gpu-control-plane",
        "observer": "gpu-control-plane",
        "web": "gpu-control-plane-unprivileged",
        "beat": "gpu-control-plane-unprivileged",
        "migrate": "gpu-control-plane-unprivileged",
        "webhook-worker": "gpu-control-plane-unprivileged",
    }
    # Web mounts its token for the health check's GET /version, unit logs (get pods/log) and
    # writing tenant secrets (create, patch, delete secrets; never a read); beat, migrate and
    # the webhook workers never call the Kubernetes API.
    tokens = {name for name in WORKLOADS if _pod(name)["automountServiceAccountToken"]}
    assert tokens == {"worker", "observer", "web"}
    bound = {
        (subject["name"], obj["roleRef"]["name"])
        for (kind, _), obj in OBJECTS.items()
        if kind.endswith("RoleBinding")
        for subject in obj["subjects"]
    }
    assert {role for name, role in bound if name == "gpu-control-plane-unprivileged"} == {
        "gpu-control-plane-logs",
        "gpu-control-plane-secrets",
    }


def test_migrations_run_once_in_the_job_and_the_apps_wait_for_them():
    job = WORKLOADS["migrate"]["spec"]
    assert job["template"]["spec"]["restartPolicy"] == "Never"
    assert job["ttlSecondsAfterFinished"] > 0
    for name in ("web", "worker", "beat"):
        (wait,) = _pod(name)["initContainers"]
        assert "manage.py migrate --check" in " ".join(wait["command"])


def test_all_pods_run_the_same_image():
    images = {c["image"] for name in WORKLOADS for c in _containers(name)}
    assert images == {"gpu-control-plane"}
    spec = yaml.safe_load((CONTROL_PLANE / "kustomization.yaml").read_text())
    assert [image["name"] for image in spec["images"]] == ["gpu-control-plane"]
