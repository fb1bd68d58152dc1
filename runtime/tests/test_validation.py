"""Customer input rules (pure): unit names, image references, registry allow-list, templates."""

import pytest

from controlplane.validation import fold_case
from runtime import validation


@pytest.mark.parametrize("name", ["a", "demo-instance", "x" * 54, "a1-b2"])
def test_valid_unit_names(name):
    assert validation.unit_name(name) is None


@pytest.mark.parametrize(
    "name", ["", "x" * 55, "has.dot", "Upper", "-lead", "trail-", "under_score"]
)
def test_invalid_unit_names(name):
    assert validation.unit_name(name)


def test_only_ascii_is_case_folded():
    # KELVIN SIGN lower-cases to "k" in Python; a name that needs that fold is refused.
    assert fold_case("Demo-K") == "demo-k"
    assert fold_case("\u212a") == "\u212a"
    assert validation.unit_name(fold_case("\u212aelvin"))


@pytest.mark.parametrize(
    "image",
    [
        "python:3.12",
        "busybox",
        "ghcr.io/org/app:v1.2.3",
        "localhost:5000/team/app",
        "registry.example.com:443/a/b/c@sha256:" + "a" * 64,
        "nvcr.io/nvidia/pytorch:24.05-py3",
    ],
)
def test_valid_image_references(image):
    assert validation.image_reference(image, allowlist=[]) is None


@pytest.mark.parametrize(
    "image",
    [
        "",
        "Python:3.12",
        "python:",
        "a b",
        "http://x/y",
        "x@sha256:short",
        "é",
        "x" * 600,
        # A digest is exactly sha256 and 64 lower-case hex digits: not 32, 65 or upper-case.
        "python@sha256:" + "a" * 32,
        "python@sha256:" + "a" * 65,
        "python@sha256:" + "A" * 64,
        "python@md5:" + "a" * 64,
    ],
)
def test_invalid_image_references(image):
    assert validation.image_reference(image, allowlist=[])


@pytest.mark.parametrize(
    ("image", "registry"),
    [
        ("python:3.12", "docker.io"),
        ("library/python", "docker.io"),
        ("ghcr.io/a/b", "ghcr.io"),
        ("localhost/a", "localhost"),
        ("localhost:5000/a", "localhost:5000"),
    ],
)
def test_registry_of_an_image(image, registry):
    assert validation.image_registry(image) == registry


def test_allowlist_enforced():
    assert validation.image_reference("ghcr.io/a/b", allowlist=["ghcr.io"]) is None
    problem = validation.image_reference("python:3.12", allowlist=["ghcr.io"])
    assert "from docker.io" in problem


def test_template_rules():
    assert validation.template({"command": ["sh"], "env": [{"name": "A", "value": "1"}]}) == {}
    problems = validation.template(
        {"env": [{"name": "GPU_COUNT", "value": "9"}, {"name": "1=bad"}], "nodeName": "x"}
    )
    assert set(problems) == {"template.env[0].name", "template.env[1].name", "template.nodeName"}


@pytest.mark.parametrize("value", ["demo\n", "demo\r\n"])
def test_trailing_newline_is_not_a_valid_name(value):
    assert validation.unit_name(value)
    assert validation.image_reference(f"python{value}", allowlist=[])


def test_template_strings_must_be_storable():
    problems = validation.template(
        {"args": ["ok", "nul\x00"], "env": [{"name": "A", "value": "\ud800"}]}
    )
    assert set(problems) == {"template.args", "template.env[0].value"}


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "NVIDIA_REQUIRE_CUDA",
        "NVIDIA_MIG_CONFIG_DEVICES",
        "NVIDIA_IMEX_CHANNELS",
        "CUDA_MPS_PIPE_DIRECTORY",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
        "CUDA_DEVICE_MEMORY_LIMIT_0",
        "CUDA_DEVICE_SM_LIMIT",
        "GPU_COUNT",
    ],
)
def test_device_selection_variables_are_refused_naming_the_variable(name):
    problems = validation.template({"env": [{"name": name, "value": "all"}]})
    assert list(problems) == ["template.env[0].name"]
    assert name in problems["template.env[0].name"]


@pytest.mark.parametrize(
    "name", ["CUDA_VISIBLE_DEVICES", "NVIDIA_TF32_OVERRIDE", "HF_TOKEN", "NCCL_DEBUG"]
)
def test_variables_that_only_choose_among_the_unit_s_own_devices_are_allowed(name):
    assert validation.template({"env": [{"name": name, "value": "0"}]}) == {}


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/proc",
        "/proc/self",
        "/sys/fs",
        "/dev",
        "/dev/shm",
        "/etc",
        "/etc/ssh-keys",
        "/etc/ssh-keys/x",
        "/etc/hosts",
        "/etc/resolv.conf",
        "/var/run/secrets/kubernetes.io",
        "/run/secrets",
        "/dev/../proc",
    ],
)
def test_system_and_reserved_mount_paths_are_refused(path):
    _mounts, problems = validation.storage_mounts([{"name": "data", "mountPath": path}])
    assert "reserved" in problems["storageMounts[0].mountPath"]


@pytest.mark.parametrize(
    "path", ["/data", "/etc/app", "/home/runtime/models", "/devices", "/sysroot"]
)
def test_ordinary_mount_paths_are_accepted(path):
    _mounts, problems = validation.storage_mounts([{"name": "data", "mountPath": path}])
    assert problems == {}


def test_the_ssh_keys_mount_is_reserved_where_the_pod_puts_it():
    from runtime import manifests

    assert validation.reserved_mount_path(manifests.SSH_KEYS_PATH)


@pytest.mark.parametrize("protocol", [{}, [], 6, None, "tcp", "SCTP"])
def test_a_port_protocol_of_any_wrong_shape_is_named_not_a_crash(protocol):
    problems = validation.template({"ports": [{"name": "http", "port": 80, "protocol": protocol}]})
    assert problems == {"template.ports[0].protocol": "protocol must be TCP or UDP."}
