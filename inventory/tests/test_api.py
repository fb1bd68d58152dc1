"""GET /api/v1/operator/inventory: operator keys only, the stored document in the envelope.
Its figures against a synced cluster are tested in test_sync.py."""

import pytest
from django.utils import timezone

from inventory.models import InventorySnapshot
from tenancy.tests.factories import TenantFactory
from tests.endpoints import EndpointTest, client_for

pytestmark = pytest.mark.django_db


class TestOperatorInventory(EndpointTest):
    path = "/api/v1/operator/inventory"

    @pytest.fixture
    def operator_client(self):
        return client_for(TenantFactory(is_operator=True))

    def test_a_never_synced_mirror_is_empty_and_stale(self, operator_client):
        data = self.get_success_response(operator_client).json()["data"]
        assert (data["stale"], data["asOf"], data["totalGpuAllocatable"]) == (True, None, 0)

    def test_a_tenant_key_is_forbidden(self, auth_client):
        self.get_error_response(auth_client, status=403, code="forbidden")

    def test_no_key_is_unauthenticated(self, api_client):
        self.get_error_response(api_client, status=401, code="unauthenticated")

    def test_a_synced_mirror_is_served_as_stored(self, operator_client):
        InventorySnapshot.objects.create(
            pk=1, as_of=timezone.now(), document='{"totalGpuAllocatable": 16}'
        )
        data = self.get_success_response(operator_client).json()["data"]
        assert (data["stale"], data["totalGpuAllocatable"]) == (False, 16)

    def test_statements_are_the_baseline(self, operator_client):
        InventorySnapshot.objects.create(pk=1, as_of=timezone.now(), document="{}")
        operator_client.get(self.path)  # warm the key's stamp and the stored document
        # key + tenant, the last sync run, the snapshot's time (the document is not re-read)
        self.assert_statement_count(operator_client)
