"""Amounts on admin pages read as people say them, not as the integers they are stored as."""

import pytest
from django.urls import reverse

from controlplane.admin import readable_bytes, readable_cpu


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.5 KiB"),
        (40 * 2**30, "40 GiB"),
        (249_108_103_168, "232 GiB"),
        (3 * 2**40 // 2, "1.5 TiB"),
        (2**70, "1024 EiB"),
        (None, "-"),
    ],
)
def test_readable_bytes(size, text):
    assert readable_bytes(size) == text


@pytest.mark.parametrize(
    ("millicores", "text"),
    [(0, "0 cores"), (250, "0.25 cores"), (1000, "1 core"), (12_500, "12.5 cores"), (None, "-")],
)
def test_readable_cpu(millicores, text):
    assert readable_cpu(millicores) == text


@pytest.mark.django_db
def test_unit_page_shows_the_ordered_amounts_not_their_integer_copies(admin_client):
    from runtime.tests.factories import UnitFactory

    unit = UnitFactory()  # the article's package: 10 CPU, 40Gi
    page = admin_client.get(reverse("admin:runtime_gpuunit_change", args=[unit.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "40Gi" in html
    assert str(40 * 2**30) not in html
    assert "Cpu millicores" not in html
    assert "Memory bytes" not in html
