"""Every catalog rule, checked through the model's full_clean against real Postgres."""

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from catalog.models import Package
from catalog.tests.factories import PackageFactory

pytestmark = pytest.mark.django_db


def errors_of(package: Package) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as excinfo:
        package.full_clean()
    return excinfo.value.message_dict


def test_article_package_is_valid_and_defaults_claim_request_name():
    package = PackageFactory.build(claim_request_name="")
    package.full_clean()
    assert package.claim_request_name == "gpu"


def test_id_is_stored_lower_case_when_given_mixed_case():
    package = PackageFactory(id="  GPU-RTX3080-2X-CPU10-MEM40G ")
    assert Package.objects.get().id == "gpu-rtx3080-2x-cpu10-mem40g" == package.id


@pytest.mark.parametrize(
    "bad_id", ["has_underscore", "-leading", "trailing-", "a" * 64, "dot.ted", ""]
)
def test_id_rejected_when_not_a_dns_label(bad_id):
    assert "id" in errors_of(PackageFactory.build(id=bad_id))


def test_id_unique_ignoring_case():
    PackageFactory(article=True)
    errors = errors_of(PackageFactory.build(id="GPU-RTX3080-2x-cpu10-mem40g"))
    assert errors["id"] == ["A package with this ID already exists."]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cpu", "ten"),
        ("cpu", "0"),
        ("cpu", "-1"),
        ("cpu", "0.0001"),
        ("cpu", "10 cores"),
        ("memory", "40GB"),
        ("memory", "0Gi"),
        ("memory", "0.5"),
        ("memory", ""),
    ],
)
def test_quantity_rejected_when_invalid_or_not_positive(field, value):
    assert field in errors_of(PackageFactory.build(**{field: value}))


@pytest.mark.parametrize(("cpu", "memory"), [("10000m", "40960Mi"), ("0.5", "1e9"), ("1", "1Ti")])
def test_quantity_accepted_in_every_kubernetes_notation(cpu, memory):
    PackageFactory.build(cpu=cpu, memory=memory).full_clean()


@pytest.mark.parametrize(
    ("cpu", "memory", "millicores", "size"),
    [
        ("10000m", "40960Mi", 10_000, 40 * 2**30),
        ("0.5", "1e9", 500, 10**9),
        ("1", "1Ti", 1000, 2**40),
    ],
)
def test_quantities_as_numbers_for_quota_sums(cpu, memory, millicores, size):
    package = PackageFactory.build(cpu=cpu, memory=memory)
    assert (package.cpu_millicores, package.memory_bytes) == (millicores, size)


def test_gpu_must_be_positive():
    errors = errors_of(PackageFactory.build(gpu=0, count=0))
    assert "gpu" in errors
    assert "count" in errors


def test_count_must_equal_gpu():
    errors = errors_of(PackageFactory.build(gpu=2, count=4))
    assert errors == {"count": ["allocation.count (4) must equal gpu (2)."]}


def test_count_equal_gpu_enforced_by_database_too():
    PackageFactory(article=True)
    with pytest.raises(IntegrityError), transaction.atomic():
        Package.objects.update(count=3)


@pytest.mark.parametrize("bad", ["Nvidia_RTX", "UPPER", "a..b", "-x", "x" * 254])
def test_device_class_name_must_be_dns_subdomain(bad):
    assert "device_class_name" in errors_of(PackageFactory.build(device_class_name=bad))


def test_device_class_name_accepts_dotted_subdomain():
    PackageFactory.build(device_class_name="gpu.nvidia.com").full_clean()


@pytest.mark.parametrize("bad", ["GPU", "gpu.0", "g_pu", "x" * 64])
def test_claim_request_name_must_be_dns_label(bad):
    assert "claim_request_name" in errors_of(PackageFactory.build(claim_request_name=bad))


def test_selectors_must_compile_as_cel():
    errors = errors_of(PackageFactory.build(selectors=["device.driver == ", "true"]))
    assert len(errors["selectors"]) == 1
    assert errors["selectors"][0] == (
        "Selector 1 (device.driver ==) is not valid CEL at column 17: mismatched input '<EOF>'."
    )


@pytest.mark.parametrize(
    ("selector", "says"),
    [
        ("foo.bar == 1", "undeclared reference to foo"),
        ('"abc"', "must evaluate to bool, not string"),
        ("device.driver", "must evaluate to bool, not string"),
        ('device.attributes["gpu.nvidia.com"]', "must evaluate to bool, not map"),
        ("1 + 2", "must evaluate to bool, not int"),
    ],
)
def test_selectors_must_type_check_as_a_boolean_over_device(selector, says):
    errors = errors_of(PackageFactory.build(selectors=[selector]))
    assert says in errors["selectors"][0]


def test_selectors_that_compile_are_kept():
    selector = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA GeForce RTX 3080"'
    package = PackageFactory(selectors=[f"  {selector}  "])
    assert Package.objects.get(pk=package.pk).selectors == [selector]


def test_capacity_keys_and_values_checked():
    errors = errors_of(PackageFactory.build(capacity={"bad key!": "x"}))
    assert "not a qualified name" in errors["capacity"][0]
    assert "is not a Kubernetes quantity" in errors["capacity"][0]


def test_termination_grace_defaults_to_kubernetes_30_seconds():
    package = PackageFactory()
    package.refresh_from_db()
    assert package.termination_grace_seconds == 30


@pytest.mark.parametrize("seconds", [0, 1, 3600])
def test_termination_grace_accepted_from_0_to_an_hour(seconds):
    PackageFactory.build(termination_grace_seconds=seconds).full_clean()


@pytest.mark.parametrize("seconds", [-1, 3601])
def test_termination_grace_rejected_outside_0_to_an_hour(seconds):
    errors = errors_of(PackageFactory.build(termination_grace_seconds=seconds))
    assert errors["termination_grace_seconds"] == [
        "terminationGracePeriodSeconds must be a whole number of seconds from 0 to 3600, "
        f"not {seconds}."
    ]


def test_every_failing_field_reported_at_once():
    errors = errors_of(PackageFactory.build(id="Bad_Id", cpu="0", memory="x", gpu=1, count=2))
    assert {"id", "cpu", "memory", "count"} <= set(errors)
