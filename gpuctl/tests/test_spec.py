"""The bodies gpuctl builds from flags: an order, an update, a secret; a malformed flag is a
usage error naming it, before anything is sent."""

from __future__ import annotations

import pytest

from gpuctl import spec
from gpuctl.errors import ExitCode, GpuctlError


def test_an_order_from_flags_has_the_api_s_shape():
    body = spec.order(
        operation_id="op-1",
        name="web",
        package="gpu-rtx3080-2x-cpu10-mem40g",
        image="python:3.12",
        region="eu-west",
        command=["python", "-m", "http.server", "8080"],
        env=["MODE=a=b"],
        secret_env=["TOKEN=hf:token"],
        ports=["http:8080", "dns:53/udp"],
        scheme="http",
        ssh_keys=["laptop"],
        mounts=["data:/data", "models:/models:ro"],
        stop_after="8h",
        interruptible=True,
        auto_resume=True,
        reservation="training",
    )
    assert body == {
        "operationID": "op-1",
        "name": "web",
        "packageID": "gpu-rtx3080-2x-cpu10-mem40g",
        "image": "python:3.12",
        "template": {
            "command": ["python", "-m", "http.server", "8080"],
            "env": [
                {"name": "MODE", "value": "a=b"},
                {"name": "TOKEN", "secretRef": {"name": "hf", "key": "token"}},
            ],
            "ports": [
                {"name": "http", "port": 8080},
                {"name": "dns", "port": 53, "protocol": "UDP"},
            ],
        },
        "access": {"scheme": "http"},
        "ssh": {"enabled": True, "keys": ["laptop"]},
        "storageMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "models", "mountPath": "/models", "readOnly": True},
        ],
        "region": "eu-west",
        "stopAfter": "8h",
        "interruptible": True,
        "autoResume": True,
        "reservation": "training",
    }


def test_flags_go_over_a_file_s_fields(tmp_path):
    file = tmp_path / "unit.yaml"
    file.write_text("image: old\ntemplate:\n  args: [--fast]\n  env: [{name: A, value: '1'}]\n")
    body = spec.order(
        operation_id="op",
        name="u",
        package="p",
        image="new",
        base=spec.document(file),
        env=["B=2"],
        ssh=True,
    )
    assert body["image"] == "new"
    assert body["template"] == {
        "args": ["--fast"],
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
    }
    assert body["ssh"] == {"enabled": True}
    assert "interruptible" not in body  # on demand unless asked
    assert "reservation" not in body


@pytest.mark.parametrize(
    ("build", "flag"),
    [
        (lambda: spec.env_var("NOVALUE"), "--env"),
        (lambda: spec.secret_env_var("A=secret-without-key"), "--secret-env"),
        (lambda: spec.port("http"), "--port"),
        (lambda: spec.port("http:web"), "--port"),
        (lambda: spec.mount("data"), "--mount"),
        (lambda: spec.mount("data:/d:rw"), "--mount"),
    ],
)
def test_a_malformed_flag_is_a_usage_error_naming_it(build, flag):
    with pytest.raises(GpuctlError) as raised:
        build()
    assert raised.value.exit_code == ExitCode.USAGE
    assert raised.value.message.startswith(flag)


def test_durations_are_seconds():
    assert [spec.seconds(t) for t in ("90", "90s", "10m", "1h30m", "1d")] == [
        90,
        90,
        600,
        5400,
        86400,
    ]
    for bad in ("", "10x", "m"):
        with pytest.raises(GpuctlError):
            spec.seconds(bad)


def test_an_update_is_a_merge_patch_and_none_clears_stop_after():
    assert spec.update(operation_id="op", image="busybox", stop_after="none") == {
        "operationID": "op",
        "image": "busybox",
        "stopAfter": None,
    }
    with pytest.raises(GpuctlError, match="nothing to change"):
        spec.update(operation_id="op")


def test_a_file_that_is_not_an_object_is_refused(tmp_path):
    file = tmp_path / "list.yaml"
    file.write_text("- a\n")
    with pytest.raises(GpuctlError, match="expected an object"):
        spec.document(file)


def test_secret_data_from_literals_and_an_env_file(tmp_path):
    env_file = tmp_path / "secret.env"
    env_file.write_text("# tokens\nHF_TOKEN=abc=def\n\nOTHER=1\n")
    assert spec.secret_data(["OTHER=2", "EMPTY="], env_file) == {
        "HF_TOKEN": "abc=def",
        "OTHER": "2",
        "EMPTY": "",
    }
    with pytest.raises(GpuctlError, match="--from-literal"):
        spec.secret_data([], None)
