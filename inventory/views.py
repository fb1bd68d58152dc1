"""GET /api/v1/operator/inventory: a cluster's DRA inventory for operators, from its mirror."""

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request

from controlplane.api.schema import envelope, error_responses
from controlplane.api.views import ApiView
from inventory import clusters, selectors
from tenancy.permissions import IsOperator

_device = inline_serializer(
    name="DraDevice",
    fields={
        k: serializers.CharField()
        for k in ("claimName", "namespace", "request", "driver", "pool", "device")
    },
)
_tally = {
    "total": serializers.IntegerField(),
    "allocated": serializers.IntegerField(),
    "tainted": serializers.IntegerField(
        help_text="devices with a NoSchedule or NoExecute taint (allocated or not)"
    ),
    "free": serializers.IntegerField(help_text="neither allocated nor tainted"),
}
_taint = inline_serializer(
    name="DeviceTaint",
    fields={
        "key": serializers.CharField(),
        "value": serializers.CharField(allow_blank=True),
        "effect": serializers.CharField(help_text="NoSchedule or NoExecute"),
        "timeAdded": serializers.CharField(allow_blank=True),
        "source": serializers.CharField(
            help_text="where it comes from: ResourceSlice/<name> or DeviceTaintRule/<name>"
        ),
    },
)
# Which device a row is about, and on which node.
_device_fields = {
    "driver": serializers.CharField(),
    "pool": serializers.CharField(),
    "device": serializers.CharField(),
    "nodeName": serializers.CharField(allow_blank=True),
}
_tainted_device = inline_serializer(
    name="TaintedDevice",
    fields={
        **_device_fields,
        "allocated": serializers.BooleanField(),
        "claim": serializers.CharField(allow_null=True, help_text="<namespace>/<name>"),
        "taints": serializers.ListField(child=_taint),
    },
)


def _quantities(help_text: str) -> serializers.DictField:
    """Quantities by capacity name. A field of its own per use: one instance declared under
    several names is copied once per serializer, so the schema would name only the last."""
    return serializers.DictField(child=serializers.CharField(), help_text=help_text)


_shared_device = inline_serializer(
    name="SharedDevice",
    fields={
        **_device_fields,
        "shares": serializers.IntegerField(help_text="claims holding a share of it"),
        "capacity": _quantities("what the device publishes"),
        "consumed": _quantities("what the claims sharing it hold"),
        "remaining": _quantities("capacity less consumed"),
    },
)
_counter_set = inline_serializer(
    name="CounterSet",
    fields={
        "driver": serializers.CharField(),
        "pool": serializers.CharField(),
        "name": serializers.CharField(),
        "nodeName": serializers.CharField(allow_blank=True),
        "counters": serializers.DictField(
            child=inline_serializer(
                name="CounterAmounts",
                fields={
                    "total": serializers.CharField(),
                    "remaining": serializers.CharField(
                        help_text="after the devices allocated claims hold drew theirs"
                    ),
                },
            )
        ),
    },
)
_inventory = inline_serializer(
    name="Inventory",
    fields={
        "cluster": serializers.CharField(help_text="the registered cluster it is of"),
        "asOf": serializers.DateTimeField(allow_null=True),
        "stale": serializers.BooleanField(),
        "totalGpuAllocatable": serializers.IntegerField(),
        "draClaimCount": serializers.IntegerField(),
        "draAllocatedClaims": serializers.IntegerField(),
        "draAllocatedDevices": serializers.IntegerField(),
        "draResourceSlices": serializers.IntegerField(),
        "draDevices": serializers.ListField(child=_device),
        "draTaintedDevices": serializers.IntegerField(help_text="devices with any taint"),
        "taintedDevices": serializers.ListField(child=_tainted_device),
        "sharedDevices": serializers.ListField(
            child=_shared_device, help_text="devices that allow multiple allocations"
        ),
        "counterSets": serializers.ListField(
            child=_counter_set,
            help_text="shared counters of partitionable devices (sharedCounters): a free device "
            "fits only while the sets it consumes from have what it draws",
        ),
        "deviceClasses": serializers.ListField(
            child=inline_serializer(
                name="DeviceClassTally", fields={"name": serializers.CharField(), **_tally}
            )
        ),
        "nodes": serializers.ListField(
            child=inline_serializer(
                name="NodeTally",
                fields={
                    "name": serializers.CharField(),
                    **_tally,
                    "ready": serializers.BooleanField(),
                    "cpuAllocatable": serializers.CharField(),
                    "cpuFree": serializers.CharField(),
                    "memoryAllocatable": serializers.CharField(),
                    "memoryFree": serializers.CharField(),
                },
            )
        ),
        "pools": serializers.ListField(child=serializers.DictField()),
        "quotas": serializers.ListField(child=serializers.DictField()),
    },
)


class InventoryQuery(serializers.Serializer):
    cluster = serializers.CharField(
        required=False,
        help_text="a registered cluster's name (default: the control plane's own cluster, "
        "CLUSTER_NAME)",
    )

    def validate_cluster(self, value: str) -> str:
        if clusters.named(value) is None:
            raise serializers.ValidationError(f"no cluster named {value!r} is registered")
        return value


class OperatorInventoryView(ApiView):
    permission_classes = [IsOperator]
    query_serializer = InventoryQuery

    @extend_schema(
        summary="A cluster's DRA inventory (operator keys only)",
        parameters=[InventoryQuery],
        responses={
            200: envelope(_inventory, name="InventoryResponse"),
            **error_responses(400, 401, 403, 503),
        },
    )
    def get(self, request: Request) -> HttpResponse:
        cluster = self.validated_query(request).get("cluster")
        return HttpResponse(
            selectors.get_inventory_document(cluster), content_type="application/json"
        )
