"""CEL device selectors: the Kubernetes DRA environment and helpers on NVIDIA-style devices."""

from __future__ import annotations

import pytest

from dracel import (
    CelCompileError,
    CelRuntimeError,
    SelectorRuntimeError,
    compile_selector,
    device_env,
    device_matches,
    device_selected,
    evaluate,
    matching_sets,
    reads,
    type_check,
)
from dracel import device_key as key_of

H100 = {
    "name": "gpu-0",
    "attributes": {
        "type": {"string": "gpu"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "architecture": {"string": "Hopper"},
        "driverVersion": {"version": "570.124.6"},
        "index": {"int": 0},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:10"},
    },
    "capacity": {"memory": {"value": "80Gi"}},
}
RTX = {
    "name": "gpu-1",
    "attributes": {
        "type": {"string": "gpu"},
        "productName": {"string": "NVIDIA GeForce RTX 3080"},
        "driverVersion": {"version": "535.54.3"},
    },
    "capacity": {"memory": {"value": "10Gi"}},
}


def _matches(expression: str, device: dict) -> bool:
    return device_matches([compile_selector(expression)], device_env("gpu.nvidia.com", device))


@pytest.mark.parametrize(
    ("expression", "h100", "rtx"),
    [
        ("device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'", True, False),
        (
            "device.attributes['gpu.nvidia.com'].productName.lowerAscii().contains('h100')",
            True,
            False,
        ),
        ("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA')", True, True),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0", True, False),
        ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('10Gi'))", True, False),
        ("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('81920Mi'))", False, True),
        ("device.capacity['gpu.nvidia.com'].memory == quantity('10240Mi')", False, True),
        (
            "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))",
            True,
            False,
        ),
        (
            "device.driver == 'gpu.nvidia.com' && "
            "device.attributes['gpu.nvidia.com'].type == 'gpu'",
            True,
            True,
        ),
        ("device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:10'", True, False),
        ("has(device.attributes['gpu.nvidia.com'].architecture)", True, False),
        ("device.attributes['gpu.nvidia.com'].productName.matches('RTX [0-9]+$')", False, True),
    ],
)
def test_selector_matches_only_the_intended_devices_when_evaluated(
    expression: str, h100: bool, rtx: bool
) -> None:
    assert _matches(expression, H100) is h100
    assert _matches(expression, RTX) is rtx


def test_device_does_not_match_when_selector_reads_a_missing_attribute() -> None:
    selector = compile_selector("device.attributes['gpu.nvidia.com'].architecture == 'Ampere'")
    with pytest.raises(CelRuntimeError, match="no such key: architecture"):
        evaluate(selector, device_env("gpu.nvidia.com", RTX))
    assert device_matches([selector], device_env("gpu.nvidia.com", RTX)) is False


def test_device_selected_raises_naming_the_selector_when_one_fails_at_run_time() -> None:
    env = device_env("gpu.nvidia.com", RTX)
    generic = compile_selector("device.attributes['gpu.nvidia.com'].type == 'gpu'")
    missing = compile_selector("device.attributes['gpu.nvidia.com'].architecture == 'Ampere'")
    with pytest.raises(SelectorRuntimeError, match="no such key: architecture") as raised:
        device_selected([generic, missing], env)
    assert (raised.value.index, raised.value.expression) == (1, missing.expression)
    assert str(raised.value) == "CEL runtime error: no such key: architecture"


def test_device_selected_stops_at_the_first_selector_that_does_not_match() -> None:
    env = device_env("gpu.nvidia.com", RTX)
    other = compile_selector("device.attributes['gpu.nvidia.com'].type == 'mig'")
    missing = compile_selector("device.attributes['gpu.nvidia.com'].architecture == 'Ampere'")
    assert device_selected([other, missing], env) is False
    assert device_selected([], env) is True


def test_unknown_domain_reads_as_an_empty_map_when_guarded_with_has() -> None:
    assert _matches("!has(device.attributes['other.example.com'].model)", RTX) is True


def test_non_boolean_result_counts_as_no_match_when_evaluated() -> None:
    selector = compile_selector("device.attributes['gpu.nvidia.com'].productName")
    with pytest.raises(CelRuntimeError, match="returned str"):
        evaluate(selector, device_env("gpu.nvidia.com", H100))
    assert device_matches([selector], device_env("gpu.nvidia.com", H100)) is False


def test_all_selectors_must_match_when_several_are_given() -> None:
    env = device_env("gpu.nvidia.com", H100)
    generic = compile_selector("device.attributes['gpu.nvidia.com'].type == 'gpu'")
    product = compile_selector("device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L40S'")
    assert device_matches([generic], env) is True
    assert device_matches([generic, product], env) is False


def test_compile_selector_raises_clear_error_when_syntax_is_invalid() -> None:
    with pytest.raises(CelCompileError, match="CEL compile error"):
        compile_selector("device.attributes[")


def test_compile_selector_caches_by_expression_text() -> None:
    expression = "device.driver == 'gpu.nvidia.com'"
    assert compile_selector(expression) is compile_selector(expression)


def test_semver_helpers_follow_semver_precedence() -> None:
    env = device_env("gpu.nvidia.com", H100)
    for expression in (
        "semver('1.0.0-alpha').isLessThan(semver('1.0.0'))",
        "semver('1.10.0').isGreaterThan(semver('1.9.9'))",
        "semver('v1.2', true) == '1.2.0'",
        "semver('2.3.4').major() == 2 && semver('2.3.4').minor() == 3",
        "isSemver('1.2.3') && !isSemver('1.2')",
    ):
        assert evaluate(compile_selector(expression), env) is True, expression


def test_quantity_helpers_compare_across_suffixes() -> None:
    env = device_env("gpu.nvidia.com", H100)
    for expression in (
        "quantity('1Gi').compareTo(quantity('1024Mi')) == 0",
        "quantity('500m').isLessThan(quantity('1'))",
        "quantity('1Gi').add(quantity('1Gi')) == quantity('2Gi')",
        "quantity('2Gi').asInteger() == 2147483648",
        "isQuantity('40Gi') && !isQuantity('forty')",
    ):
        assert evaluate(compile_selector(expression), env) is True, expression


def test_matching_sets_names_every_set_whose_selectors_all_match() -> None:
    env = device_env("gpu.nvidia.com", H100)
    sets = {
        "h100": [
            compile_selector("device.attributes['gpu.nvidia.com'].productName.contains('H100')")
        ],
        "rtx": [
            compile_selector("device.attributes['gpu.nvidia.com'].productName.contains('3080')")
        ],
        "big-h100": [
            compile_selector("device.attributes['gpu.nvidia.com'].productName.contains('H100')"),
            compile_selector(
                "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"
            ),
        ],
        "broken": [compile_selector("device.attributes['gpu.nvidia.com'].missing == 1")],
        "anything": [],
    }
    assert matching_sets(sets, env) == {"h100", "big-h100", "anything"}
    for name, selectors in sets.items():
        assert device_matches(selectors, env) == (name in {"h100", "big-h100", "anything"})


@pytest.mark.parametrize(
    ("expression", "read"),
    [
        (
            'device.driver == "gpu.nvidia.com" && '
            'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L40S"',
            {("attributes", "gpu.nvidia.com", "productName")},
        ),
        (
            "device.capacity['gpu.nvidia.com']['memory'].compareTo(quantity('12Gi')) >= 0",
            {("capacity", "gpu.nvidia.com", "memory")},
        ),
        ("has(device.attributes['d'].x)", {("attributes", "d", "x")}),
        ("device.attributes['d'].name.startsWith('a')", {("attributes", "d", "name")}),
        ("true", set()),
        # Each of these may see attributes it does not name.
        ("device.attributes['d'].exists(k, k == 'uuid')", None),
        ("size(device.attributes['d']) > 2", None),
        ("device.attributes['d'].size() > 1", None),
        ("'uuid' in device.attributes['d']", None),
        ("device.attributes['d'] == {'a': 1}", None),
        ('device.attributes["d\\"x"].y == 1', None),
    ],
)
def test_reads_names_the_values_a_selector_can_see(expression, read):
    assert reads([compile_selector(expression)]) == (None if read is None else frozenset(read))


def test_device_key_tells_apart_only_what_the_selectors_read():
    read = sorted(
        reads([compile_selector("device.attributes['gpu.nvidia.com'].productName == 'x'")])
    )
    other = {**H100, "name": "gpu-7", "attributes": {**H100["attributes"], "index": {"int": 7}}}
    assert key_of("gpu.nvidia.com", H100, read) == key_of("gpu.nvidia.com", other, read)
    assert key_of("gpu.nvidia.com", H100, read) != key_of("gpu.nvidia.com", RTX, read)
    assert key_of("gpu.nvidia.com", H100, read) != key_of("other.driver", H100, read)
    qualified = {
        **H100,
        "attributes": {"gpu.nvidia.com/productName": H100["attributes"]["productName"]},
    }
    assert key_of("gpu.nvidia.com", H100, read) != key_of("gpu.nvidia.com", qualified, read)


@pytest.mark.parametrize(
    "expression",
    [
        'device.driver == "gpu.nvidia.com"',
        'device.attributes["gpu.nvidia.com"].productName == "H100"',
        'has(device.attributes["d"].mig) ? device.attributes["d"].mig : false',
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
        'device.attributes["d"].all(k, k.startsWith("x"))',
        '["a", "b"].exists(name, device.attributes["d"].model == name)',
    ],
)
def test_type_check_passes_boolean_selectors_over_device(expression: str) -> None:
    assert type_check(expression) is None


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("foo.bar == 1", "undeclared reference to foo"),
        ("device.driver == other", "undeclared reference to other"),
        ('"abc"', "not string"),
        ("device.capacity", "not map"),
        ("[true]", "not list"),
    ],
)
def test_type_check_refuses_what_the_api_server_refuses(expression: str, says: str) -> None:
    problem = type_check(expression)
    assert problem is not None
    assert says in problem
