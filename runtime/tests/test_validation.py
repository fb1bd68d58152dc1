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
