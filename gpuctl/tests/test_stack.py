"""`.venv/bin/gpuctl` as a customer runs it, against the stack: the live server with a real API
key, a real Celery worker, the observer and the simulated cluster. A unit is ordered with
--wait until Running, listed, read, its timeline and log read and followed, ssh'd into,
restarted, stopped and deleted, each waited for; refusals come back as the envelope's message
and the exit code of their class. The other resources go through their commands too."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from conftest import start_observer
from controlplane import kube
from runtime import manifests
from runtime.tests.helpers import remove_namespace_objects, wait_until
from tenancy.tests.factories import TenantFactory, key_for
from tenancy.tests.test_sshkeys import ED25519

pytestmark = [
    pytest.mark.long,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("celery_worker"),
]

# Installed by `make` (requirements/dev.txt installs this checkout): the command under test.
GPUCTL = Path(sys.executable).with_name("gpuctl")
TCP_HOST = "gpu.example.test"


class Gpuctl:
    """Runs the gpuctl command with its own config folder and prints a transcript (shown by
    pytest -rP, and on failure)."""

    def __init__(self, config_home: Path, **env: str) -> None:
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("GPUCTL_")},
            "XDG_CONFIG_HOME": str(config_home),
            "COLUMNS": "160",
            **env,
        }

    def run(self, *args: str, code: int | None = 0, **env: str) -> subprocess.CompletedProcess[str]:
        """gpuctl `args`, which must exit with `code` (None: any)."""
        done = subprocess.run(
            [str(GPUCTL), *args],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=240,
        )
        print(f"$ gpuctl {' '.join(args)}\n{done.stderr}{done.stdout}[exit {done.returncode}]")
        if code is not None:
            assert done.returncode == code, f"gpuctl {args} exited {done.returncode}: {done.stderr}"
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)

    def follow(self, *args: str) -> tuple[subprocess.Popen[str], list[str]]:
        """gpuctl running on; the lines it has printed so far, as they come."""
        process = subprocess.Popen(
            [str(GPUCTL), *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        lines: list[str] = []

        def read() -> None:
            assert process.stdout is not None
            lines.extend(process.stdout)

        threading.Thread(target=read, daemon=True).start()
        return process, lines


def operation_id_in(stderr: str) -> str:
    found = re.search(r"operationID (\S+)", stderr)
    assert found, stderr
    return found.group(1)


@pytest.fixture
def customer(live_server, tmp_path, settings) -> Iterator[tuple[Gpuctl, Any]]:
    """A tenant of its own, its key in a gpuctl profile; its cluster objects removed after."""
    settings.ACCESS_TCP_HOST = TCP_HOST  # where the live server says SSH units are reached
    tenant = TenantFactory()
    gpuctl = Gpuctl(tmp_path / "config")
    gpuctl.run(
        "config", "set-profile", "test", "--api-url", live_server.url, "--api-key", key_for(tenant)
    )
    try:
        yield gpuctl, tenant
    finally:
        remove_namespace_objects(tenant.namespace)
        for kind in (kube.SERVICE, kube.CONFIGMAP, kube.PERSISTENTVOLUMECLAIM, kube.SECRET):
            for obj in kube.list_objects(kind, namespace=tenant.namespace):
                if obj["metadata"].get("labels", {}).get(manifests.LABEL_MANAGED_BY):
                    kube.delete(kind, tenant.namespace, obj["metadata"]["name"])


@pytest.fixture
def observer(cluster) -> Iterator[subprocess.Popen]:
    """The observer, which brings units' phases up to date as the cluster changes (what
    --wait waits for)."""
    PackageFactory(article=True)  # before its first listing, which computes what fits
    process = start_observer("gpuctl")
    yield process
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=20)


def test_a_unit_ordered_run_followed_stopped_and_deleted_with_gpuctl(
    customer, observer, cluster, tmp_path, settings
):
    gpuctl, tenant = customer
    gpuctl.run("ssh-keys", "create", "laptop", "--key", ED25519)
    order = ("units", "create", "talker", "-p", ARTICLE_PACKAGE_ID, "-i", "python:3.12", "--ssh")
    command = ("--", "python", "-u", "train.py")

    created = gpuctl.run(*order, "--wait", "--timeout", "120", *command)
    operation = operation_id_in(created.stderr)
    assert re.fullmatch(r"[0-9a-f-]{36}", operation)  # a UUID made for the user
    assert "talker: Running" in created.stderr
    assert re.search(r"^phase\s+Running$", created.stdout, re.MULTILINE)

    # Sent again with the printed operationID, the order is the same unit, not a second one;
    # under a new one, the name is taken.
    replayed = gpuctl.run(*order, "--operation-id", operation, "-o", "json", *command)
    assert f"talker already ordered: operationID {operation}" in replayed.stderr
    assert json.loads(replayed.stdout)["operationID"] == operation
    taken = gpuctl.run(*order, *command, code=4)
    assert "(409 name_conflict)" in taken.stderr

    listed = gpuctl.run("units", "list").stdout.splitlines()
    assert listed[0].split()[:3] == ["NAME", "PHASE", "REASON"]
    assert [row.split()[:2] for row in listed[1:]] == [["talker", "Running"]]
    unit = gpuctl.json("units", "get", "talker")
    assert (unit["name"], unit["phase"], unit["packageID"]) == (
        "talker",
        "Running",
        ARTICLE_PACKAGE_ID,
    )
    assert unit["template"]["command"] == ["python", "-u", "train.py"]
    reasons = [event["reason"] for event in gpuctl.json("units", "events", "talker")]
    assert reasons[:2] == ["Accepted", "Provisioning"], reasons
    assert "Running" in reasons, reasons
    assert gpuctl.run("units", "events", "talker").stdout.split()[:4] == [
        "LAST",
        "SEEN",
        "TYPE",
        "REASON",
    ]

    log = gpuctl.run("units", "logs", "talker").stdout
    assert "devstack: command python -u train.py" in log

    # ssh runs the unit's command: --print shows it, and without it gpuctl becomes ssh (here a
    # stand-in that says what it was given).
    shown = wait_until(
        lambda: gpuctl.run("units", "ssh", "talker", "--print", code=None).stdout.strip(),
        "the unit's ssh command",
    )
    assert re.fullmatch(rf"ssh -p \d+ runtime@{TCP_HOST}", shown), shown
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ssh").write_text('#!/bin/sh\necho "ssh was run with: $*"\n')
    (fake / "ssh").chmod(0o755)
    execed = gpuctl.run("units", "ssh", "talker", "--", "-v", PATH=f"{fake}:{os.environ['PATH']}")
    assert execed.stdout == f"ssh was run with: {shown.removeprefix('ssh ')} -v\n"

    # An update is a merge patch sent with the unit's etag; --wait waits for its generation.
    updated = gpuctl.run("units", "update", "talker", "--stop-after", "4h", "--wait", "-o", "json")
    unit = json.loads(updated.stdout)
    assert (unit["stopAfter"], unit["generation"], unit["observedGeneration"]) == ("4h", 2, 2)
    stale = gpuctl.run(
        "units", "update", "talker", "--image", "busybox", "--if-match", '"1-x"', code=4
    )
    assert "(412 precondition_failed)" in stale.stderr

    restarted = gpuctl.run("units", "restart", "talker", "--wait", "--timeout", "120")
    assert re.search(r"^status\s+succeeded$", restarted.stdout, re.MULTILINE)
    assert "talker: Running" in restarted.stderr
    assert gpuctl.json("operations", "get", operation_id_in(restarted.stderr))["kind"] == "restart"

    # A followed log streams the lines the container prints, until the server's deadline for
    # a followed log (a kubelet also ends it when the container goes; KWOK's cannot tell).
    # Long enough that a busy machine still sends the log so far and the new line before it.
    settings.LOGS_FOLLOW_SECONDS = 15
    follower, lines = gpuctl.follow("units", "logs", "talker", "-f")
    try:
        wait_until(lambda: any("devstack: started" in line for line in lines), "the log so far")
        cluster.append_log(tenant.namespace, "unit-talker", ["epoch 1 loss 0.9"])
        wait_until(lambda: "epoch 1 loss 0.9\n" in lines, "the new line, followed")
        wait_until(lambda: follower.poll() is not None, "the follow to end", timeout=60)
        assert follower.returncode == 0
        stopped = gpuctl.run("units", "stop", "talker", "--wait", "--timeout", "120")
        assert "talker: Stopped" in stopped.stderr
    finally:
        if follower.poll() is None:
            os.killpg(follower.pid, signal.SIGTERM)
            follower.wait(timeout=20)
    print("$ gpuctl units logs talker -f\n" + "".join(lines))
    assert gpuctl.json("units", "get", "talker")["phase"] == "Stopped"
    started = gpuctl.run("units", "start", "talker", "--wait", "--timeout", "120")
    assert "talker: Running" in started.stderr

    deleted = gpuctl.run("units", "delete", "talker", "--wait", "--timeout", "120")
    assert "waiting for talker to be deleted" in deleted.stderr
    assert "talker: Terminated" in deleted.stderr
    assert not kube.list_objects(kube.POD, namespace=tenant.namespace)

    assert gpuctl.json("units", "list") == []
    assert [(u["name"], u["phase"]) for u in gpuctl.json("units", "list", "--all")] == [
        ("talker", "Terminated")
    ]

    assert gpuctl.run("units", "get", "nope", code=3).stderr == (
        "gpuctl: gpu unit nope not found. (404 not_found)\n"
    )
    invalid = gpuctl.run(
        "units", "create", "Not_A_Name", "-p", ARTICLE_PACKAGE_ID, "-i", "busybox", code=2
    )
    first, *fields = invalid.stderr.splitlines()
    assert first == "gpuctl: The request is invalid. (400 invalid_request)"
    assert fields[0].startswith("  name: "), invalid.stderr


def test_keys_secrets_storage_and_the_account_through_gpuctl(customer, cluster, tmp_path):
    gpuctl, tenant = customer
    PackageFactory(article=True)
    kube.create(
        kube.NAMESPACE, None, manifests.build_namespace(tenant.namespace, tenant=tenant.slug)
    )
    try:
        assert [p["id"] for p in gpuctl.json("packages", "list")] == [ARTICLE_PACKAGE_ID]
        table = gpuctl.run("packages", "list").stdout.splitlines()
        assert table[1].split()[:3] == [ARTICLE_PACKAGE_ID, "2x", "nvidia-rtx-3080"]
        assert "INTERRUPTIBLE/H" in table[0].split()  # "-": sold on demand only
        assert [r["name"] for r in gpuctl.json("regions", "list")] == ["default"]

        key_file = tmp_path / "id_ed25519.pub"
        key_file.write_text(ED25519 + "\n")
        gpuctl.run("ssh-keys", "create", "laptop", "--file", str(key_file))
        assert [k["name"] for k in gpuctl.json("ssh-keys", "list")] == ["laptop"]
        assert gpuctl.json("ssh-keys", "get", "laptop")["kind"] == "ssh-ed25519"
        again = gpuctl.run("ssh-keys", "create", "laptop", "--file", str(key_file), code=4)
        assert "(409 ssh_key_conflict)" in again.stderr
        gpuctl.run("ssh-keys", "delete", "laptop")
        assert gpuctl.json("ssh-keys", "list") == []
        # Each write is in the tenant's audit log, the refused one too, newest first.
        events = gpuctl.json("audit", "list", "--action", "ssh_keys_create")
        assert [(e["outcome"], e["status"], e["errorCode"]) for e in events] == [
            ("failure", 409, "ssh_key_conflict"),
            ("success", 201, ""),
        ]
        assert len(gpuctl.json("audit", "list", "--limit", "1")) == 1
        audit = gpuctl.run("audit", "list", "--action", "ssh_keys_delete").stdout.splitlines()
        assert audit[0].split()[:4] == ["TIME", "SOURCE", "ACTOR", "ACTION"]
        actor = events[0]["actor"]
        assert actor["kind"] == "api_key"
        assert audit[1].split()[1:7] == [
            "api",
            actor["name"],
            "ssh_keys_delete",
            "ssh_keys/laptop",
            "success",
            "204",
        ]

        env_file = tmp_path / "hf.env"
        env_file.write_text("# Hugging Face\nHF_TOKEN=hf_abc\n")
        gpuctl.run(
            "secrets", "set", "hf", "--from-env-file", str(env_file), "--from-literal", "USER=me"
        )
        assert gpuctl.json("secrets", "get", "hf")["keys"] == ["HF_TOKEN", "USER"]
        assert [s["name"] for s in gpuctl.json("secrets", "list")] == ["hf"]
        gpuctl.run("secrets", "delete", "hf")
        gpuctl.run("secrets", "get", "hf", code=3)

        created = gpuctl.json("storage", "create", "cache", "--size", "1Gi", "--region", "default")
        assert (created["name"], created["size"], created["region"]) == ("cache", "1Gi", "default")
        gpuctl.run("storage", "create", "elsewhere", "--size", "1Gi", "--region", "nowhere", code=2)
        assert [s["name"] for s in gpuctl.json("storage", "list")] == ["cache"]
        gpuctl.run("storage", "delete", "cache")

        # A reservation for tomorrow: made, listed with its slots, and cancelled before it
        # starts; one that ends before it starts is refused naming the field.
        start = datetime.now(UTC) + timedelta(days=1)
        window = ["--start", f"{start:%Y-%m-%dT%H:%M:%SZ}", "--package", ARTICLE_PACKAGE_ID]
        end = ["--end", f"{start + timedelta(hours=2):%Y-%m-%dT%H:%M:%SZ}"]
        made = gpuctl.json("reservations", "create", "nightly", *window, *end, "--count", "2")
        assert (made["status"], made["count"], made["devices"]) == ("Scheduled", 2, 4)
        table = gpuctl.run("reservations", "list").stdout.splitlines()
        assert table[0].split()[:4] == ["NAME", "PACKAGE", "COUNT", "START"]
        assert table[1].split()[:3] == ["nightly", ARTICLE_PACKAGE_ID, "2"]
        assert gpuctl.json("reservations", "get", "nightly")["free"] == 2
        early = ["--end", f"{start - timedelta(hours=1):%Y-%m-%dT%H:%M:%SZ}"]
        bad = gpuctl.run("reservations", "create", "early", *window, *early, code=2)
        assert "end" in bad.stderr
        assert gpuctl.json("reservations", "cancel", "nightly")["status"] == "Cancelled"

        quota = gpuctl.json("quota")
        assert {"cpu", "memory", "claims", "limits", "costToDate"} <= set(quota)
        table = gpuctl.run("quota").stdout.splitlines()
        assert table[0].split() == ["RESOURCE", "HARD", "USED", "FREE"]
        assert table[1].split() == [
            "cpu",
            quota["cpu"]["hard"],
            quota["cpu"]["used"],
            quota["cpu"]["free"],
        ]
        assert gpuctl.json("usage", "--group-by", "unit")["groupBy"] == "unit"
        assert gpuctl.run("usage").stdout.splitlines()[0].split()[0] == "PACKAGE"
        assert set(gpuctl.json("budget")) >= {"month", "limit", "spent", "forecast"}
        month = f"{datetime.now(UTC):%Y-%m}"
        assert gpuctl.json("statement", month)["month"] == month
        assert gpuctl.run("statement", month, "--csv").stdout.startswith("month,")
        bad = gpuctl.run("usage", "--from", "last tuesday", code=2)
        assert bad.stderr.splitlines()[1].startswith("  from: "), bad.stderr
    finally:
        kube.delete(kube.NAMESPACE, None, tenant.namespace)


def test_a_wrong_key_is_exit_5_and_the_profile_can_be_overridden(customer, live_server):
    gpuctl, _tenant = customer
    refused = gpuctl.run("units", "list", code=5, GPUCTL_API_KEY="not-a-key")
    assert "(401 unauthenticated)" in refused.stderr
    shown = gpuctl.json("config", "show")
    assert (shown["profile"], shown["apiUrl"]) == ("test", live_server.url)


def test_webhooks_through_gpuctl(customer, settings):
    gpuctl, _tenant = customer
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the worker's too: conftest
    received: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        made = gpuctl.run("webhooks", "create", "--url", url, "-e", "unit.phase_changed")
        assert "keep its secret" in made.stderr
        hook = gpuctl.json("webhooks", "list")[0]
        assert (hook["url"], hook["events"], hook["enabled"]) == (url, ["unit.phase_changed"], True)
        assert "secret" not in hook
        assert "whsec_" in made.stdout

        gpuctl.run("webhooks", "test", hook["id"])
        wait_until(lambda: received, "the test delivery")
        delivered = wait_until(
            lambda: [
                d
                for d in gpuctl.json("webhooks", "deliveries", hook["id"])
                if d["status"] == "succeeded"
            ],
            "the delivery's log to say succeeded",
        )
        assert delivered[0]["eventType"] == "webhook.test"
        table = gpuctl.run("webhooks", "deliveries", hook["id"]).stdout.splitlines()
        assert table[0].split()[:4] == ["ID", "EVENT", "SUBJECT", "STATUS"]
        assert "succeeded" in table[1].split()

        rotated = gpuctl.json("webhooks", "rotate-secret", hook["id"])
        assert rotated["secret"].startswith("whsec_")
        assert rotated["previousSecretValidUntil"]
        paused = gpuctl.json("webhooks", "update", hook["id"], "--disable")
        assert paused["enabled"] is False
        refused = gpuctl.run(
            "webhooks", "update", hook["id"], "--url", "http://169.254.169.254/", code=2
        )
        assert "link-local" in refused.stderr
        gpuctl.run("webhooks", "delete", hook["id"])
        gpuctl.run("webhooks", "get", hook["id"], code=3)
    finally:
        server.shutdown()
        server.server_close()
