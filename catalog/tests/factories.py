"""Package factory for tests: valid by default, override what a test is about."""

from catalog.models import Package

ARTICLE_PACKAGE = {
    "id": "gpu-rtx3080-2x-cpu10-mem40g",
    "spec_name": "gpu.rtx3080.2x.10c.40g",
    "cpu": "10",
    "memory": "40Gi",
    "gpu": 2,
    "device_class_name": "nvidia-rtx-3080",
    "claim_request_name": "gpu",
    "count": 2,
}


def PackageFactory(*, save: bool = True, **overrides) -> Package:
    package = Package(**{**ARTICLE_PACKAGE, **overrides})
    if save:
        package.full_clean()
        package.save()
    return package
