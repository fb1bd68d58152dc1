"""YAML round trip, dry-run plan and all-or-nothing import, through services and the commands."""

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from catalog.models import Package
from catalog.services import CatalogImportError, export_catalog, import_catalog
from catalog.tests.factories import PackageFactory
from dracel import quantity
from tenancy.models import Tenant

pytestmark = pytest.mark.django_db

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "packages.yaml"

ARTICLE_YAML = """\
packages:
  - id: gpu-rtx3080-2x-cpu10-mem40g
    specName: gpu.rtx3080.2x.10c.40g
    cpu: "10"
    memory: 40Gi
    gpu: 2
    allocation:
      deviceClassName: nvidia-rtx-3080
      claimRequestName: gpu
      count: 2
"""


def run_command(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_article_yaml_round_trips_to_the_same_packages():
    import_catalog(text=ARTICLE_YAML)
    exported = yaml.safe_load(export_catalog())
    assert exported == yaml.safe_load(ARTICLE_YAML)


def test_sample_catalog_round_trips_byte_for_byte():
    run_command("import_catalog", str(SAMPLE))
    assert Package.objects.count() >= 4
    assert export_catalog() == SAMPLE.read_text()


def test_export_then_import_is_a_no_op():
    import_catalog(text=SAMPLE.read_text())
    plan = import_catalog(text=export_catalog())
    assert (plan.added, plan.changed, plan.deactivated) == ([], [], [])
    assert len(plan.unchanged) == Package.objects.count()


def test_inactive_package_round_trips_with_active_false():
    PackageFactory(active=False)
    text = export_catalog()
    assert "active: false" in text
    Package.objects.all().delete()
    import_catalog(text=text)
    assert Package.objects.get().active is False


def test_dry_run_prints_plan_and_writes_nothing():
    PackageFactory(article=True, price="0.36")  # unchanged (the sample prices it)
    PackageFactory(id="gpu-old-1x", spec_name="old", gpu=1, count=1)  # pruned
    PackageFactory(id="gpu-h100-1x-cpu16-mem128g", spec_name="h100", cpu="8", gpu=1, count=1)
    out = run_command("import_catalog", str(SAMPLE), "--dry-run", "--prune")
    assert "add        gpu-h100-8x-cpu128-mem240g" in out
    assert "change     gpu-h100-1x-cpu16-mem128g (" in out
    assert "cpu: '8' -> '16'" in out
    assert "leave      gpu-rtx3080-2x-cpu10-mem40g" in out
    assert "deactivate gpu-old-1x" in out
    assert "(dry run: nothing written)" in out
    assert Package.objects.count() == 3
    assert Package.objects.get(id="gpu-h100-1x-cpu16-mem128g").cpu == "8"
    assert Package.objects.get(id="gpu-old-1x").active is True


def test_apply_with_prune_adds_changes_and_deactivates():
    PackageFactory(id="gpu-old-1x", spec_name="old", gpu=1, count=1)
    PackageFactory(id="gpu-h100-1x-cpu16-mem128g", spec_name="h100", cpu="8", gpu=1, count=1)
    run_command("import_catalog", str(SAMPLE), "--prune")
    assert Package.objects.get(id="gpu-h100-1x-cpu16-mem128g").cpu == "16"
    assert Package.objects.get(id="gpu-old-1x").active is False
    sample = yaml.safe_load(SAMPLE.read_text())["packages"]
    assert Package.objects.filter(active=True).count() == len(sample)


def test_quantities_compared_by_value_not_text():
    import_catalog(text=ARTICLE_YAML)
    plan = import_catalog(text=ARTICLE_YAML.replace('"10"', '"10000m"').replace("40Gi", "40960Mi"))
    assert plan.changed == []
    assert plan.unchanged == ["gpu-rtx3080-2x-cpu10-mem40g"]


def test_bad_entry_names_index_and_field_and_nothing_is_written():
    bad = ARTICLE_YAML + (
        "  - id: gpu-second\n    specName: x\n    cpu: '1'\n    memory: 1Gi\n    gpu: 2\n"
        "    allocation:\n      deviceClassName: nvidia-rtx-3080\n      count: 3\n"
        "      claimName: unit-x-gpu\n"
    )
    with pytest.raises(CatalogImportError) as excinfo:
        import_catalog(text=bad)
    problems = excinfo.value.problems
    assert any(p.startswith("packages[1].allocation.count:") for p in problems)
    assert any(p.startswith("packages[1].allocation.claimName:") for p in problems)
    assert not any(p.startswith("packages[0]") for p in problems)
    assert Package.objects.count() == 0


def test_case_only_duplicate_ids_rejected_and_nothing_written():
    text = ARTICLE_YAML + ARTICLE_YAML.split("\n", 1)[1].replace(
        "gpu-rtx3080-2x-cpu10-mem40g", "GPU-RTX3080-2X-CPU10-MEM40G"
    )
    with pytest.raises(CatalogImportError) as excinfo:
        import_catalog(text=text)
    assert "packages[1].id: duplicates packages[0]" in excinfo.value.problems[0]
    assert Package.objects.count() == 0


def test_command_reports_problems_as_error(tmp_path):
    source = tmp_path / "bad.yaml"
    source.write_text(ARTICLE_YAML.replace('"10"', "lots"))
    with pytest.raises(CommandError, match=r"packages\[0\]\.cpu"):
        call_command("import_catalog", str(source))


def test_unknown_fields_and_wrong_shape_rejected():
    with pytest.raises(CatalogImportError) as excinfo:
        import_catalog(text=ARTICLE_YAML.replace("gpu: 2\n", "gpu: 2\n    gpus: 2\n", 1))
    assert excinfo.value.problems == ["packages[0].gpus: unknown field."]
    with pytest.raises(CatalogImportError, match="exactly one top-level key"):
        import_catalog(text="items: []\n")


def test_if_empty_skips_when_catalog_has_packages():
    PackageFactory(article=True)
    out = run_command("import_catalog", str(SAMPLE), "--if-empty")
    assert "not imported" in out
    assert Package.objects.count() == 1


def test_export_command_writes_file(tmp_path):
    PackageFactory(article=True)
    target = tmp_path / "out.yaml"
    run_command("export_catalog", "-o", str(target))
    assert yaml.safe_load(target.read_text())["packages"][0]["id"] == "gpu-rtx3080-2x-cpu10-mem40g"


def test_every_sample_package_fits_the_sample_tenants_quota():
    """The sample tenant (make run's `default`, k8s/tenant-quota.yaml) can order each sample
    package: a catalog that offers what its own tenant can never order confuses a first try."""
    hard = yaml.safe_load((SAMPLE.parents[2] / "k8s" / "tenant-quota.yaml").read_text())["spec"][
        "hard"
    ]
    defaults = Tenant()
    assert quantity.parse_cpu(hard["requests.cpu"]) == quantity.parse_cpu(defaults.quota_cpu)
    assert quantity.parse_bytes(hard["requests.memory"]) == quantity.parse_bytes(
        defaults.quota_memory
    )
    for package in yaml.safe_load(SAMPLE.read_text())["packages"]:
        assert quantity.parse_cpu(package["cpu"]) <= quantity.parse_cpu(hard["requests.cpu"]), (
            package["id"]
        )
        assert quantity.parse_bytes(package["memory"]) <= quantity.parse_bytes(
            hard["requests.memory"]
        ), package["id"]


def test_termination_grace_round_trips_and_is_written_only_when_not_the_default():
    graced = ARTICLE_YAML + "    terminationGracePeriodSeconds: 600\n"
    import_catalog(text=graced)
    assert Package.objects.get().termination_grace_seconds == 600
    assert yaml.safe_load(export_catalog()) == yaml.safe_load(graced)
    assert import_catalog(text=export_catalog(), dry_run=True).changed == []
    # Left out, the package gets Kubernetes' 30 seconds, and the export leaves it out again.
    ((_, change),) = import_catalog(text=ARTICLE_YAML).changed
    assert change.fields == {"terminationGracePeriodSeconds": (600, 30)}
    assert Package.objects.get().termination_grace_seconds == 30
    assert "terminationGracePeriodSeconds" not in export_catalog()
    import_catalog(text=ARTICLE_YAML + "    terminationGracePeriodSeconds: 0\n")
    assert yaml.safe_load(export_catalog())["packages"][0]["terminationGracePeriodSeconds"] == 0


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("3601", "3601"),
        ("-1", "-1"),
        ('"30"', '"30"'),
        ("1.5", "1.5"),
        ("true", "true"),
        ("null", "null"),
        ("thirty", '"thirty"'),
    ],
)
def test_termination_grace_that_is_not_0_to_3600_seconds_is_refused_by_name(value, shown):
    PackageFactory(article=True)
    with pytest.raises(CatalogImportError) as excinfo:
        import_catalog(text=ARTICLE_YAML + f"    terminationGracePeriodSeconds: {value}\n")
    assert excinfo.value.problems == [
        "packages[0].terminationGracePeriodSeconds: terminationGracePeriodSeconds must be a "
        f"whole number of seconds from 0 to 3600, not {shown}."
    ]
    assert Package.objects.get().termination_grace_seconds == 30
