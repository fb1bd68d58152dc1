"""`make run`: services, the development clusters, migrations, sample data, then web + worker +
webhook worker + observer + beat until Ctrl-C."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import redis
import yaml

from devstack import services
from devstack.cluster import ClusterError, DevCluster

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CATALOG = ROOT / "catalog" / "samples" / "packages.yaml"
CONTROL_PLANE = ROOT / "k8s" / "control-plane"
# The control plane's accounts, their RBAC and admission policies (and the opt-in components
# make run uses: it provisions tenant namespaces and publishes units' URLs), applied to each
# development cluster as a deployment applies them: each process of make run then talks to the
# clusters with the token its Deployment's pod would hold, and the API server enforces k8s/'s
# rules on it (issue 41).
ACCESS_MANIFESTS = [
    CONTROL_PLANE / "namespace.yaml",
    CONTROL_PLANE / "serviceaccount.yaml",
    CONTROL_PLANE / "rbac.yaml",
    CONTROL_PLANE / "admission-policy.yaml",
    ROOT / "k8s" / "components" / "tenant-provisioning" / "rbac.yaml",
    ROOT / "k8s" / "components" / "published-urls" / "rbac.yaml",  # units' URLs (DEV_ACCESS)
]
ACCOUNTS_NAMESPACE = "gpu-control-plane"
# Each process of make run -> the Deployment of k8s/control-plane it stands for.
DEPLOYMENTS = {
    "web": "web.yaml",
    "worker": "worker.yaml",
    "webhooks": "webhook-worker.yaml",
    "observer": "observer.yaml",
    "beat": "beat.yaml",
}
# make run's tokens are made again at each start and last a week: a stack left running longer
# is refused by its clusters until it is restarted.
TOKEN_SECONDS = 7 * 86400
# What each development cluster gets at start: Gateway API CRDs, a Gateway and a default
# StorageClass, so a unit gets a URL and bound storage (applied again, unchanged, each start).
DEV_OBJECTS = ROOT / "k8s" / "components" / "dev-gateway"
DEV_ACCESS = {
    "ACCESS_DOMAIN": "units.localhost",
    "ACCESS_GATEWAY": "gateway-system/gpu-gateway",
    "ACCESS_PUBLIC_SCHEME": "http",
    "ACCESS_TCP_HOST": "127.0.0.1",
}
# The second region of `make run` (ARCHITECTURE §20): a smaller development cluster, one node
# of four RTX 3080s, registered as a ClusterProfile would be (manage.py import_clusters), beside
# the first (the process's own cluster, CLUSTER_NAME "default").
SECOND_CLUSTER = "eu-west"
SECOND_CLUSTER_TOPOLOGY = {
    "generate": {"nodes": 1, "gpus_per_node": 4, "product": "NVIDIA GeForce RTX 3080"}
}
SECOND_CLUSTER_PROFILE = {
    "apiVersion": "multicluster.x-k8s.io/v1alpha1",
    "kind": "ClusterProfile",
    "metadata": {"name": SECOND_CLUSTER},
    "spec": {"displayName": "EU West (development)"},
    "status": {"properties": [{"name": "region", "value": "eu-west"}]},
}
# What `python -m devstack manage` needs to reach a running `make run`: written once it is up,
# removed when it stops.
STACK_FILE = "stack.json"
STACK_VARIABLES = (
    "DATABASE_URL",
    "REDIS_URL",
    "KUBECONFIG",
    "CLUSTER_CREDENTIALS_DIR",
    "DJANGO_DEBUG",
)
# controlplane.health.HEARTBEAT_KEY: the previous run's heartbeat is not this run's worker.
HEARTBEAT_KEY = "controlplane:heartbeat"


def _start(name: str, command: list[str], env: dict[str, str]) -> tuple[str, subprocess.Popen]:
    # Own process group: one Ctrl-C reaches us once and we stop children in order.
    return name, subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)


def _stop(processes: list[tuple[str, subprocess.Popen]]) -> None:
    # SIGTERM to each leader only: Celery's and gunicorn's main processes stop their own
    # children once these finish what they are doing. The whole group at once killed a Celery
    # pool process in the middle of a task (WorkerLostError); what is left of a group after
    # its leader went, or when it does not go, is ended after it.
    for _name, process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for _name, process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
        else:
            _signal_group(process.pid, signal.SIGTERM)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is gone already
        os.killpg(pgid, sig)


def _start_clusters(
    data_root: Path, env: dict[str, str], gateway_ports: dict[str, str]
) -> list[DevCluster]:
    """The development clusters, unless KUBECONFIG points at a real one: `default` (the sample
    topology; .devdata/kubeconfig, also as kubeconfig-default) and eu-west
    (.devdata/kubeconfig-eu-west), each with its gateway on its port of `gateway_ports`,
    started side by side. Their etcd data stays in .devdata/clusters/, so units outlive a
    restart of make run as they would a restart of the control plane."""
    if env.get("KUBECONFIG"):
        print(f"using the cluster in KUBECONFIG={env['KUBECONFIG']}", flush=True)
        return []
    clusters = [
        DevCluster(
            data_root / "clusters" / "default",
            name="default",
            gateway_port=int(gateway_ports["default"]),
            extra_objects=[DEV_OBJECTS],
        ),
        DevCluster(
            data_root / "clusters" / SECOND_CLUSTER,
            name=SECOND_CLUSTER,
            topology=SECOND_CLUSTER_TOPOLOGY,
            gateway_port=int(gateway_ports[SECOND_CLUSTER]),
            extra_objects=[DEV_OBJECTS],
        ),
    ]
    # One after the other, from this thread: each cluster's processes end with the thread
    # that started them (DevCluster), and this one lives as long as make run.
    print("starting the development clusters (default, eu-west)...", flush=True)
    try:
        for cluster in clusters:
            cluster.start()
    except ClusterError as error:
        for cluster in clusters:
            cluster.stop()
        raise RuntimeError(f"a development cluster did not start: {error}") from error
    for cluster in clusters:
        shutil.copyfile(cluster.kubeconfig, data_root / f"kubeconfig-{cluster.name}")
    shutil.copyfile(clusters[0].kubeconfig, data_root / "kubeconfig")
    # The operator's view (setup, `make manage`, kubectl): the clusters' admin, with the
    # other clusters' kubeconfigs in the data folder. Each process gets its own (_credentials).
    env["KUBECONFIG"] = str(data_root / "kubeconfig")
    env["CLUSTER_CREDENTIALS_DIR"] = str(data_root)
    _issue_tokens(clusters, data_root)
    # The dev component's Gateway publishes units: a newcomer's HTTP unit gets a URL, which
    # each development cluster's gateway routes (no container answers behind it); on a real
    # cluster these name a real gateway.
    for name, value in DEV_ACCESS.items():
        env.setdefault(name, value)
    # Webhooks may reach a receiver on this machine (a real deployment: public addresses only).
    env.setdefault("WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8")
    return clusters


def deployment_account(process: str) -> str | None:
    """The ServiceAccount whose token `process`'s Deployment mounts, or None when it mounts none."""
    documents = yaml.safe_load_all((CONTROL_PLANE / DEPLOYMENTS[process]).read_text())
    manifest = next(d for d in documents if d and d["kind"] == "Deployment")
    pod = manifest["spec"]["template"]["spec"]
    if pod.get("automountServiceAccountToken") is False:
        return None
    return pod["serviceAccountName"]


def _issue_tokens(clusters: list[DevCluster], data_root: Path) -> None:
    """k8s/'s accounts and rules in each cluster, and each account's kubeconfigs of every
    cluster in .devdata/credentials/<account>/ (kubeconfig-<cluster>): the directory a
    deployment mounts from the account's Secret (k8s/components/multicluster)."""
    accounts = {deployment_account(process) for process in DEPLOYMENTS} - {None}
    for cluster in clusters:
        for manifest in ACCESS_MANIFESTS:
            cluster.apply_manifests(manifest)
        for account in sorted(a for a in accounts if a):
            cluster.write_account_kubeconfig(
                data_root / "credentials" / account / f"kubeconfig-{cluster.name}",
                ACCOUNTS_NAMESPACE,
                account,
                seconds=TOKEN_SECONDS,
            )


def _credentials(env: dict[str, str], data_root: Path, process: str) -> dict[str, str]:
    """`env` for `process`, holding its Deployment's token of each development cluster (none
    at all when its Deployment mounts none)."""
    account = deployment_account(process)
    folder = data_root / "credentials" / (account or "none")
    folder.mkdir(parents=True, exist_ok=True)
    kubeconfig = str(folder / "kubeconfig-default") if account else ""
    return {**env, "KUBECONFIG": kubeconfig, "CLUSTER_CREDENTIALS_DIR": str(folder)}


def _ignore_signals() -> None:
    """Once stopping, a second signal (a terminal's Ctrl-C and a `kill` of the whole process
    group arrive together) must not interrupt the cleanup halfway."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _wait_until_healthy(base: str, processes: list[tuple[str, subprocess.Popen]]) -> dict:
    """Health until it says ok (the worker's first heartbeat, the observer's lead), at most a
    minute: the banner then says what is true."""
    deadline = time.monotonic() + 60
    body: dict = {}
    while time.monotonic() < deadline:
        if any(process.poll() is not None for _name, process in processes):
            break
        try:
            with urllib.request.urlopen(f"{base}/api/v1/health", timeout=2) as response:
                body = json.loads(response.read())["data"]
            if body.get("status") == "ok":
                return body
        except (OSError, ValueError, KeyError):
            pass
        # Once a second: a minute of asking stays within HEALTH_RATE_PER_ADDRESS.
        time.sleep(1.0)
    return body


def run(*, data_root: Path) -> int:
    port = os.environ.get("PORT", "8000")
    data_root.mkdir(parents=True, exist_ok=True)
    stack_file = data_root / STACK_FILE

    def terminate(_signum: int, _frame: object) -> None:
        _ignore_signals()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    # Ctrl-C stops everything even when started from a shell that made us ignore SIGINT (a
    # background job inherits SIG_IGN, and Python then installs no handler of its own).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    processes: list[tuple[str, subprocess.Popen]] = []
    clusters: list[DevCluster] = []
    with services.environment(data_root=data_root) as env:
        try:
            ports = _metrics_ports(int(port))
            clusters = _start_clusters(data_root, env, _gateway_ports(int(port)))
            development = bool(clusters)

            def own(process: str) -> dict[str, str]:
                # With a KUBECONFIG of yours, every process uses it as given.
                return _credentials(env, data_root, process) if development else env

            # One Django process runs every setup command (devstack/bootstrap.py).
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "devstack.bootstrap",
                    str(data_root),
                    *(["--second-cluster"] if development else []),
                ],
                cwd=ROOT,
                env=env,
                check=True,
            )
            redis.Redis.from_url(env["REDIS_URL"]).delete(HEARTBEAT_KEY)
            python = sys.executable
            celery = [python, "-m", "celery", "-A", "controlplane"]
            processes += [
                _start(
                    "web",
                    [
                        python,
                        "-m",
                        "gunicorn",
                        "controlplane.wsgi:application",
                        "--bind",
                        f"127.0.0.1:{port}",
                        "--workers",
                        "2",
                        "--threads",
                        "4",
                        "--access-logfile",
                        "-",
                    ],
                    _metrics_env(own("web"), data_root, "web"),
                ),
                _start(
                    "worker",
                    [*celery, "worker", "--concurrency", "2", "--loglevel", "INFO"],
                    _metrics_env(
                        own("worker"),
                        data_root,
                        "worker",
                        WORKER_METRICS_PORT=ports["worker"],
                    ),
                ),
                _start(
                    # Webhook deliveries, alone: a slow receiver holds no unit's work.
                    "webhooks",
                    [
                        *celery,
                        "worker",
                        "--hostname",
                        "webhooks@%h",
                        "--queues",
                        "webhooks",
                        "--pool",
                        "threads",
                        "--concurrency",
                        "8",
                        "--loglevel",
                        "INFO",
                    ],
                    own("webhooks"),
                ),
                _start(
                    "observer",
                    [python, "manage.py", "observe"],
                    {
                        **own("observer"),
                        "OBSERVER_METRICS_PORT": ports["observer"],
                    },
                ),
                _start(
                    "beat",
                    [
                        *celery,
                        "beat",
                        "--loglevel",
                        "INFO",
                        "--schedule",
                        str(data_root / "celerybeat-schedule"),
                    ],
                    own("beat"),
                ),
            ]
            base = f"http://127.0.0.1:{port}"
            health = _wait_until_healthy(base, processes)
            stack_file.write_text(
                json.dumps(
                    {"pid": os.getpid(), "env": {k: env[k] for k in STACK_VARIABLES if k in env}}
                )
            )
            _print_welcome(
                base, data_root, ports, health, _gateway_ports(int(port)) if development else {}
            )
            while all(process.poll() is None for _name, process in processes) and all(
                cluster.running() for cluster in clusters
            ):
                time.sleep(0.5)
            failed = [name for name, process in processes if process.poll() is not None]
            failed += [f"cluster {c.name} ({c.exited()})" for c in clusters if not c.running()]
            print(f"stopping: {', '.join(failed)} exited", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            _ignore_signals()
            print("\nstopping...", flush=True)
            return 0
        except (subprocess.CalledProcessError, RuntimeError) as exc:
            print(f"setup failed: {exc}", file=sys.stderr)
            return 1
        finally:
            _ignore_signals()
            stack_file.unlink(missing_ok=True)
            _stop(processes)
            for cluster in clusters:
                cluster.stop()


def _metrics_ports(port: int) -> dict[str, str]:
    """The worker's and the observer's /metrics ports: the two after the web port."""
    return {"worker": str(port + 1), "observer": str(port + 2)}


def _gateway_ports(port: int) -> dict[str, str]:
    """Each development cluster's gateway (port 80 of its Gateways): the two after /metrics."""
    return {"default": str(port + 3), SECOND_CLUSTER: str(port + 4)}


def _metrics_env(env: dict[str, str], data_root: Path, process: str, **extra: str) -> dict:
    """`env` for a process that forks workers: an empty PROMETHEUS_MULTIPROC_DIR of its own,
    so its /metrics sums its children (and never a previous run's)."""
    directory = data_root / "metrics" / process
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return {**env, "PROMETHEUS_MULTIPROC_DIR": str(directory), **extra}


def _print_welcome(
    base: str,
    data_root: Path,
    ports: dict[str, str],
    health: dict,
    gateways: dict[str, str],
) -> None:
    relative = os.path.relpath(data_root)
    status = health.get("status", "not answering")
    waiting = [name for name, check in (health.get("checks") or {}).items() if not check["ok"]]
    state = "up" if status == "ok" else f"up, {status} ({', '.join(waiting) or 'no health'})"
    print(
        f"\nGPU control plane is {state}:\n"
        f"  API health   {base}/api/v1/health\n"
        f"  API docs     {base}/api/docs/\n"
        f"  metrics      {base}/metrics (web), http://127.0.0.1:{ports['worker']}/metrics "
        f"(worker), http://127.0.0.1:{ports['observer']}/metrics (observer)\n"
        f"  dashboard    {base}/  (user demo: tenant default; admin: everything)\n"
        f"  admin        {base}/admin/  (user admin)\n"
        f"  API keys     in {relative}/demo-api-key (tenant default) and "
        f"{relative}/operator-api-key (tenant ops)\n"
        f"  kubectl      kubectl --kubeconfig {relative}/kubeconfig get gpuunits,pods,"
        "resourceclaims -A\n"
        f"               (region eu-west: --kubeconfig {relative}/kubeconfig-{SECOND_CLUSTER})\n"
        f"  manage.py    make manage ARGS='export_catalog'  (against this stack)\n"
        f"{_gateway_line(gateways)}"
        "\nOrder a unit and watch it run:\n"
        f"  KEY=$(cat {relative}/demo-api-key)\n"
        '  NAME="my-unit-$(date +%s)"   # also its operationID: resending it is a safe retry\n'
        f'  curl -s -X POST {base}/api/v1/gpu-units -H "Authorization: Bearer $KEY" \\\n'
        "       -H 'Content-Type: application/json' \\\n"
        f"       -d '{EXAMPLE_ORDER}'\n"
        f'  curl -s {base}/api/v1/gpu-units/$NAME -H "Authorization: Bearer $KEY"\n'
        f"{_gateway_example(base, gateways)}"
        "\nPress Ctrl-C to stop everything.\n",
        flush=True,
    )


def _gateway_line(gateways: dict[str, str]) -> str:
    """Where each development cluster's gateway listens: units' URLs lead there."""
    if not gateways:
        return ""
    return (
        f"  gateway      http://127.0.0.1:{gateways['default']} (region default), "
        f"http://127.0.0.1:{gateways[SECOND_CLUSTER]} ({SECOND_CLUSTER}): where units' URLs "
        "lead\n"
    )


def _gateway_example(base: str, gateways: dict[str, str]) -> str:
    """How to reach the example unit's URL through the development gateway, and what answers."""
    if not gateways:
        return ""
    url = (
        f'curl -s {base}/api/v1/gpu-units/$NAME -H "Authorization: Bearer $KEY" | '
        """python3 -c 'import json, sys; print(json.load(sys.stdin)["data"]["access"]["url"])'"""
    )
    return (
        "\nReach its access.url through the gateway. KWOK runs no containers behind the pods:\n"
        "the gateway answers 503 naming the unit, its Service and pod; SSH reaches nothing;\n"
        "logs are the development node agent's lines.\n"
        f'  curl -s --connect-to ::127.0.0.1:{gateways["default"]} "$({url})"\n'
    )


# The README's example order (tests/test_readme.py runs it): its name and operationID are the
# shell's $NAME, new per run, so running it again orders another unit.
EXAMPLE_ORDER = json.dumps(
    {
        "operationID": "$NAME",
        "name": "$NAME",
        "region": "default",
        "packageID": "gpu-rtx3080-2x-cpu10-mem40g",
        "image": "python:3.12",
        "template": {
            "command": ["python", "-m", "http.server", "8080"],
            "ports": [{"name": "http", "port": 8080}],
        },
    }
).replace('"$NAME"', '"\'"$NAME"\'"')


def manage(args: list[str], *, data_root: Path) -> int:
    """`manage.py ARGS` against the running `make run` (its database, Redis and cluster)."""
    stack_file = data_root / STACK_FILE
    try:
        stack = json.loads(stack_file.read_text())
        os.kill(stack["pid"], 0)
    except (OSError, ValueError, KeyError):
        print(
            f"make run is not running (no live {os.path.relpath(stack_file)}): start it first, "
            "or use `python -m devstack exec -- python manage.py ...` for a throwaway stack",
            file=sys.stderr,
        )
        return 2
    env = {**os.environ, **stack["env"]}
    return subprocess.call([sys.executable, "manage.py", *args], cwd=ROOT, env=env)
