"""The Storage page (a tenant lists, creates and deletes its storages through runtime.storage;
staff once they have chosen the tenant), storage mounts on the order form, and the mounted
storages on the unit page."""

from __future__ import annotations

import pytest

from dashboard.tests.conftest import client_for, make_unit
from dashboard.tests.test_views import count_queries, detail, order
from inventory.models import Cluster
from runtime import storage as storage_service
from runtime.models import GPUStorage, GPUUnit, StoragePhase, UnitPhase

pytestmark = pytest.mark.django_db

STORAGE = "/storage/"
LIVE = "/storage/live/"


def delete(name: str) -> str:
    return f"/storage/{name}/delete/"


def make_storage(tenant, name="model-cache", *, phase=StoragePhase.BOUND, **fields) -> GPUStorage:
    """A storage as the service records it, with the phase the cluster's claim would give it."""
    storage = storage_service.create_storage(
        tenant=tenant, name=name, size=fields.pop("size", "50Gi"), **fields
    )
    GPUStorage.objects.filter(pk=storage.pk).update(phase=phase)
    storage.refresh_from_db()
    return storage


def mounting(tenant, unit_name, *mounts, phase="Running"):
    return make_unit(
        tenant,
        unit_name,
        phase=phase,
        storage_mounts=[
            {"name": name, "mountPath": path, "readOnly": read_only}
            for name, path, read_only in mounts
        ],
    )


def row_of(body: str, name: str) -> str:
    return body.split(f'data-storage="{name}"')[1].split("</tr>")[0]


def error_of(body: str, field: str) -> str:
    return body.split(f'id="id_{field}_error"')[1].split("</ul>")[0]


class TestList:
    def test_anonymous_users_are_sent_to_login(self, client):
        assert client.get(STORAGE)["Location"] == f"/accounts/login/?next={STORAGE}"
        assert client.get(delete("x"))["Location"].startswith("/accounts/login/")

    def test_lists_the_tenants_storages_with_phase_size_mode_and_units(
        self, member_client, tenant, other_tenant, settings
    ):
        settings.STORAGE_CLASSES = ["fast-ssd"]
        make_storage(tenant, "model-cache", size="100Gi", storage_class="fast-ssd")
        make_storage(tenant, "datasets", access_mode="ReadOnlyMany")
        make_storage(other_tenant, "theirs")
        trainer = mounting(tenant, "trainer", ("model-cache", "/data", False))
        mounting(tenant, "reader", ("datasets", "/datasets", True))
        mounting(tenant, "finished", ("model-cache", "/data", False), phase="Terminated")
        body = member_client.get(STORAGE).content.decode()
        row = row_of(body, "model-cache")
        for text in (
            'data-phase="Bound">Bound</span>',
            ">100Gi<",
            "<code>fast-ssd</code>",
            "ReadWriteOnce",
            f'<a href="{detail(trainer)}">trainer</a>',
            "at <code>/data</code>",
            f'href="{delete("model-cache")}"',
        ):
            assert text in row
        assert "finished" not in row  # a Terminated unit mounts nothing
        assert "at <code>/datasets</code>, read-only" in row_of(body, "datasets")
        assert ">default<" in row_of(body, "datasets")
        assert "theirs" not in body
        assert "2 storages<" in body
        assert f'<a href="{STORAGE}" aria-current="page">Storage</a>' in body

    @pytest.mark.parametrize(
        ("phase", "message"),
        [
            (StoragePhase.PENDING, ""),
            (StoragePhase.FAILED, "the cluster refused the claim: storageclass nope not found"),
            (StoragePhase.LOST, ""),
            (StoragePhase.TERMINATING, "Deletion requested."),
        ],
    )
    def test_phase_is_a_badge_with_the_message(self, member_client, tenant, phase, message):
        storage = make_storage(tenant, phase=phase)
        GPUStorage.objects.filter(pk=storage.pk).update(message=message)
        row = row_of(member_client.get(STORAGE).content.decode(), "model-cache")
        assert (
            f'<span class="phase phase-{phase.lower()}" data-phase="{phase}">{phase}</span>' in row
        )
        assert message in row
        # A storage being deleted offers no second deletion.
        assert ("Delete<" in row) == (phase != StoragePhase.TERMINATING)

    def test_no_storages_yet_says_so(self, member_client):
        assert "No storages yet" in member_client.get(STORAGE).content.decode()

    def test_table_polls_and_answers_204_until_a_phase_moves(self, member_client, tenant):
        storage = make_storage(tenant, phase=StoragePhase.PENDING)
        page = member_client.get(STORAGE)
        assert f'hx-get="{LIVE}"' in page.content.decode()
        since = page.context["live"]["digest"]
        assert member_client.get(LIVE, {"since": since}).status_code == 204
        GPUStorage.objects.filter(pk=storage.pk).update(phase=StoragePhase.BOUND)
        response = member_client.get(LIVE, {"since": since})
        assert response.status_code == 200
        assert 'data-phase="Bound"' in response.content.decode()

    def test_statements_flat_in_the_number_of_storages_and_units(self, member_client, tenant):
        make_storage(tenant, "s-0")
        mounting(tenant, "u-0", ("s-0", "/data", False))
        one = count_queries(member_client, STORAGE)
        for index in range(1, 15):
            make_storage(tenant, f"s-{index}")
            mounting(tenant, f"u-{index}", (f"s-{index}", "/data", False))
        assert count_queries(member_client, STORAGE) == one


class TestCreate:
    def test_creates_the_storage_and_says_it_is_pending(self, member_client, tenant, settings):
        settings.STORAGE_CLASSES = ["fast-ssd"]
        response = member_client.post(
            STORAGE,
            {
                "name": " Model-Cache ",
                "size": "50Gi",
                "storage_class": "fast-ssd",
                "access_mode": "ReadWriteMany",
            },
        )
        assert response.status_code == 302
        assert response["Location"] == STORAGE
        storage = GPUStorage.objects.get()
        assert (storage.tenant, storage.name, storage.size, storage.storage_class) == (
            tenant,
            "model-cache",
            "50Gi",
            "fast-ssd",
        )
        assert storage.access_mode == "ReadWriteMany"
        body = member_client.get(STORAGE).content.decode()
        assert "Storage model-cache (50Gi) created; it is Pending" in body
        assert 'data-phase="Pending"' in row_of(body, "model-cache")

    def test_a_region_chosen_is_where_the_storage_lives_and_is_shown(self, member_client, tenant):
        Cluster.objects.create(name="west-1", region="eu-west", position=500)
        page = member_client.get(STORAGE).content.decode()
        assert '<option value="eu-west">eu-west</option>' in page
        response = member_client.post(
            STORAGE,
            {"name": "data", "size": "1Gi", "access_mode": "ReadWriteOnce", "region": "eu-west"},
        )
        assert response.status_code == 302
        storage = GPUStorage.objects.get()
        assert (storage.region, storage.cluster) == ("eu-west", "west-1")
        row = row_of(member_client.get(STORAGE).content.decode(), "data")
        assert 'title="cluster west-1">eu-west<' in row

    def test_form_offers_the_access_modes_read_write_once_first(self, member_client):
        body = member_client.get(STORAGE).content.decode()
        assert '<option value="ReadWriteOnce" selected>' in body
        for mode in ("ReadWriteOncePod", "ReadWriteMany", "ReadOnlyMany"):
            assert f'<option value="{mode}">' in body

    @pytest.mark.parametrize(
        ("fields", "field", "message"),
        [
            ({"name": "Not_A_Label"}, "name", "DNS-1123 label"),
            ({"name": ""}, "name", "This field is required."),
            ({"size": "lots"}, "size", "is not a Kubernetes quantity"),
            ({"size": "0"}, "size", "storage must be greater than zero"),
            ({"size": ""}, "size", "This field is required."),
            ({"storage_class": "Not A Class"}, "storage_class", "is not a DNS-1123 subdomain"),
            ({"access_mode": "WriteEverywhere"}, "access_mode", "Select a valid choice"),
        ],
    )
    def test_bad_input_is_shown_next_to_the_field(self, member_client, fields, field, message):
        body = member_client.post(
            STORAGE,
            {"name": "model-cache", "size": "50Gi", "access_mode": "ReadWriteOnce", **fields},
        ).content.decode()
        assert message in error_of(body, field)
        assert "The storage was not created" in body
        assert f'<a href="#id_{field}">' in body
        assert not GPUStorage.objects.exists()

    def test_a_name_taken_is_shown_next_to_the_name(self, member_client, tenant):
        make_storage(tenant)
        body = member_client.post(
            STORAGE, {"name": "model-cache", "size": "10Gi", "access_mode": "ReadWriteOnce"}
        ).content.decode()
        assert "A storage named model-cache exists" in error_of(body, "name")
        assert GPUStorage.objects.count() == 1

    def test_a_full_storage_quota_is_shown_next_to_the_size(self, member_client, tenant):
        tenant.quota_storage = "100Gi"
        tenant.full_clean()
        tenant.save()
        make_storage(tenant, "first", size="80Gi")
        body = member_client.post(
            STORAGE, {"name": "second", "size": "30Gi", "access_mode": "ReadWriteOnce"}
        ).content.decode()
        error = error_of(body, "size")
        assert "Not enough storage quota left: this needs 30Gi, and 80Gi of 100Gi" in error
        assert not GPUStorage.objects.filter(name="second").exists()

    def test_a_storage_larger_than_the_whole_quota_is_not_told_to_delete_storages(
        self, member_client, tenant
    ):
        tenant.quota_storage = "100Gi"
        tenant.full_clean()
        tenant.save()
        body = member_client.post(
            STORAGE, {"name": "huge", "size": "100Ti", "access_mode": "ReadWriteOnce"}
        ).content.decode()
        error = error_of(body, "size")
        assert "larger than your whole storage quota: it needs 100Ti of the 100Gi" in error
        assert "delete a storage" not in error
        assert not GPUStorage.objects.exists()

    def test_the_storage_count_quota_is_said_above_the_form(self, member_client, tenant):
        tenant.quota_storages = 1
        tenant.save()
        make_storage(tenant, "first")
        body = member_client.post(
            STORAGE, {"name": "second", "size": "1Gi", "access_mode": "ReadWriteOnce"}
        ).content.decode()
        summary = body.split('role="alert"')[1].split("</div>")[0]
        assert "The tenant has 1 of the 1 storages its quota allows" in summary
        assert not GPUStorage.objects.filter(name="second").exists()

    def test_posts_without_csrf_token_are_refused(self, member):
        strict = client_for(member, enforce_csrf_checks=True)
        response = strict.post(STORAGE, {"name": "x", "size": "1Gi"})
        assert response.status_code == 403
        assert not GPUStorage.objects.exists()


class TestDelete:
    def test_asks_for_confirmation_then_deletes(self, member_client, tenant):
        make_storage(tenant)
        page = member_client.get(delete("model-cache")).content.decode()
        assert "Delete storage model-cache?" in page
        assert "the data on it are deleted with it" in page
        assert GPUStorage.objects.get().phase == StoragePhase.BOUND  # asking deletes nothing
        response = member_client.post(delete("model-cache"))
        assert response["Location"] == STORAGE
        assert GPUStorage.objects.get().phase == StoragePhase.TERMINATING
        body = member_client.get(STORAGE).content.decode()
        assert "Deletion of storage model-cache requested" in body

    def test_a_mounted_storage_is_refused_naming_the_units(self, member_client, tenant):
        make_storage(tenant, access_mode="ReadWriteMany")
        first = mounting(tenant, "trainer", ("model-cache", "/data", False))
        mounting(tenant, "evaluator", ("model-cache", "/data", True), phase="Pending")
        page = member_client.get(delete("model-cache")).content.decode()
        assert "cannot be deleted while a unit mounts it" in page
        assert f'<a href="{detail(first)}">trainer</a>' in page
        assert "Delete those units first" in page
        assert 'class="button danger"' not in page
        # A POST anyway (the page was open before the unit mounted it) is refused in words.
        response = member_client.post(delete("model-cache"))
        assert response["Location"] == STORAGE
        assert GPUStorage.objects.get().phase == StoragePhase.BOUND
        body = member_client.get(STORAGE).content.decode()
        assert (
            "Storage model-cache was not deleted: units evaluator, trainer mount it. Delete "
            "those units first" in body
        )
        assert 'class="message message-error"' in body

    def test_a_storage_whose_units_ended_can_be_deleted(self, member_client, tenant):
        make_storage(tenant)
        mounting(tenant, "old", ("model-cache", "/data", False), phase=UnitPhase.TERMINATED)
        assert 'class="button danger"' in member_client.get(delete("model-cache")).content.decode()
        member_client.post(delete("model-cache"))
        assert GPUStorage.objects.get().phase == StoragePhase.TERMINATING

    def test_a_storage_already_gone_or_going_says_so(self, member_client, tenant):
        assert member_client.get(delete("model-cache")).status_code == 404
        member_client.post(delete("model-cache"))
        assert (
            "Storage model-cache was already deleted."
            in member_client.get(STORAGE).content.decode()
        )
        make_storage(tenant, phase=StoragePhase.TERMINATING)
        response = member_client.get(delete("model-cache"))
        assert response["Location"] == STORAGE
        assert "is already being deleted" in member_client.get(STORAGE).content.decode()

    def test_another_tenants_storage_is_not_found_and_stays(self, member_client, other_tenant):
        make_storage(other_tenant, "theirs")
        assert member_client.get(delete("theirs")).status_code == 404
        member_client.post(delete("theirs"))
        assert GPUStorage.objects.get(name="theirs").phase == StoragePhase.BOUND


class TestStaff:
    def test_see_storages_only_after_choosing_a_tenant(self, staff_client, tenant, other_tenant):
        make_storage(tenant)
        body = staff_client.get(STORAGE).content.decode()
        assert f'<option value="{tenant.slug}">{tenant.slug}</option>' in body
        assert "choose the tenant" in body
        assert 'data-storage="model-cache"' not in body
        assert 'name="size"' not in body
        chosen = staff_client.get(STORAGE, {"tenant": tenant.slug}).content.decode()
        assert f"Storage of tenant {tenant.slug}" in chosen
        assert 'data-storage="model-cache"' in chosen
        assert f'href="{delete("model-cache")}?tenant={tenant.slug}"' in chosen
        assert f'hx-get="{LIVE}?tenant={tenant.slug}"' in chosen
        other = staff_client.get(STORAGE, {"tenant": other_tenant.slug}).content.decode()
        assert 'data-storage="model-cache"' not in other

    def test_create_and_delete_for_the_chosen_tenant(self, staff_client, other_tenant):
        url = f"{STORAGE}?tenant={other_tenant.slug}"
        response = staff_client.post(
            url, {"name": "ops", "size": "1Gi", "access_mode": "ReadWriteOnce"}
        )
        assert response["Location"] == url
        assert GPUStorage.objects.get().tenant == other_tenant
        assert staff_client.get(f"{delete('ops')}?tenant={other_tenant.slug}").status_code == 200
        staff_client.post(f"{delete('ops')}?tenant={other_tenant.slug}")
        assert GPUStorage.objects.get().phase == StoragePhase.TERMINATING

    def test_creating_without_a_tenant_creates_nothing(self, staff_client):
        response = staff_client.post(STORAGE, {"name": "ops", "size": "1Gi"})
        assert response.status_code == 400
        assert not GPUStorage.objects.exists()
        assert staff_client.get(LIVE).status_code == 286  # nothing to poll


class TestOrderWithMounts:
    def test_mounts_are_ordered_with_the_unit(self, member_client, tenant, package):
        make_storage(tenant, "model-cache")
        make_storage(tenant, "datasets", access_mode="ReadOnlyMany")
        response = order(member_client, storage_mounts="model-cache:/data, Datasets:/datasets/:RO")
        unit = GPUUnit.objects.get()
        assert response["Location"] == detail(unit)
        assert unit.storage_mounts == [
            {"name": "datasets", "mountPath": "/datasets", "readOnly": True},
            {"name": "model-cache", "mountPath": "/data", "readOnly": False},
        ]

    def test_no_mounts_orders_none(self, member_client, package):
        order(member_client, storage_mounts=" , ")
        assert GPUUnit.objects.get().storage_mounts == []

    def test_form_names_the_tenants_storages(self, member_client, tenant, other_tenant, package):
        body = member_client.get("/units/new").content.decode()
        assert 'name="storage_mounts"' in body
        assert "You have no storage to mount yet" in body
        make_storage(tenant, "model-cache")
        make_storage(tenant, "pending", phase=StoragePhase.PENDING)
        make_storage(tenant, "broken", phase=StoragePhase.FAILED)
        make_storage(tenant, "going", phase=StoragePhase.TERMINATING)
        make_storage(other_tenant, "theirs")
        body = member_client.get("/units/new").content.decode()
        # Those it can mount: a Pending one too (the unit waits for it to be bound).
        assert "Your storages: model-cache, pending." in body
        assert "theirs" not in body

    @pytest.mark.parametrize(
        ("mounts", "message"),
        [
            ("model-cache", "“model-cache” is not a mount: write each as storage:/path"),
            ("model-cache:/data:rx", "“model-cache:/data:rx” is not a mount"),
            ("model-cache:data", "model-cache:data: mountPath must be an absolute path."),
            ("model-cache:/", "model-cache:/: mountPath / is reserved"),
            ("model-cache:/a, model-cache:/b", "model-cache:/b: storage model-cache is mounted"),
            ("Not_A_Name:/data", "Not_A_Name:/data: name must be a DNS-1123 label"),
            ("missing:/data", "the tenant has no storage missing."),
        ],
    )
    def test_bad_mounts_are_shown_next_to_the_mounts_field(
        self, member_client, tenant, package, mounts, message
    ):
        make_storage(tenant, "model-cache")
        response = order(member_client, storage_mounts=mounts)
        assert response.status_code == 200
        body = response.content.decode()
        assert message in error_of(body, "storage_mounts")
        assert '<a href="#id_storage_mounts">Storage mounts</a>' in body
        assert f'value="{mounts}"' in body  # kept, to be corrected
        assert not GPUUnit.objects.exists()

    def test_a_problem_found_by_the_order_names_the_mount_it_is_about(
        self, member_client, tenant, package
    ):
        make_storage(tenant, "zeta")
        make_storage(tenant, "alpha", phase=StoragePhase.FAILED)
        # The order checks the mounts in the API's order (by name): the message still says
        # which of those typed it is about.
        body = order(member_client, storage_mounts="zeta:/z, alpha:/a").content.decode()
        assert "alpha:/a: storage alpha is failed" in error_of(body, "storage_mounts")
        assert not GPUUnit.objects.exists()

    def test_a_storage_another_unit_mounts_is_shown_on_the_mounts_field(
        self, member_client, tenant, package
    ):
        make_storage(tenant, "model-cache")
        mounting(tenant, "trainer", ("model-cache", "/data", False))
        body = order(member_client, storage_mounts="model-cache:/data").content.decode()
        error = error_of(body, "storage_mounts")
        assert "model-cache can be mounted by one live unit at a time" in error
        assert "unit trainer mounts it" in error
        assert not GPUUnit.objects.filter(name="demo").exists()


class TestUnitPageMounts:
    def test_shows_each_mount_linking_to_the_storage(self, member_client, tenant):
        make_storage(tenant, "model-cache", phase=StoragePhase.PENDING)
        make_storage(tenant, "datasets", access_mode="ReadOnlyMany")
        unit = mounting(
            tenant, "trainer", ("datasets", "/datasets", True), ("model-cache", "/data", False)
        )
        body = member_client.get(detail(unit)).content.decode()
        card = body.split('aria-labelledby="mounts-heading"')[1].split("</section>")[0]
        rows = card.split("<tbody>")[1].split("</tr>")
        assert f'href="{STORAGE}#storage-datasets"><code>datasets</code></a>' in rows[0]
        assert "<code>/datasets</code>" in rows[0]
        assert "read-only" in rows[0]
        assert f'href="{STORAGE}#storage-model-cache"' in rows[1]
        assert "read-write" in rows[1]
        assert 'data-phase="Pending"' in rows[1]
        assert "2 storage mounts" in card

    def test_a_deleted_storage_is_named_without_a_link(self, member_client, tenant):
        unit = mounting(tenant, "old", ("gone", "/data", False), phase="Terminated")
        body = member_client.get(detail(unit)).content.decode()
        card = body.split('aria-labelledby="mounts-heading"')[1].split("</section>")[0]
        assert "<code>gone</code>" in card
        assert "#storage-gone" not in card
        assert ">deleted<" in card

    def test_staff_links_name_the_tenant(self, staff_client, tenant):
        make_storage(tenant)
        unit = mounting(tenant, "trainer", ("model-cache", "/data", False))
        body = staff_client.get(detail(unit)).content.decode()
        assert f'href="{STORAGE}?tenant={tenant.slug}#storage-model-cache"' in body

    def test_a_unit_without_mounts_shows_no_storage_card(self, member_client, tenant):
        unit = make_unit(tenant, "plain")
        assert "mounts-heading" not in member_client.get(detail(unit)).content.decode()
