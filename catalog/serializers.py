"""Package JSON in the article's shape (camelCase, allocation block)."""

from rest_framework import serializers

from catalog.models import Package


class PackageAllocationSerializer(serializers.Serializer):
    deviceClassName = serializers.CharField()
    claimRequestName = serializers.CharField()
    count = serializers.IntegerField()
    selectors = serializers.ListField(child=serializers.CharField(), required=False)
    capacity = serializers.DictField(child=serializers.CharField(), required=False)


class PackageSerializer(serializers.ModelSerializer):
    specName = serializers.CharField(source="spec_name")
    allocation = PackageAllocationSerializer(read_only=True)

    class Meta:
        model = Package
        fields = ["id", "specName", "cpu", "memory", "gpu", "allocation"]
