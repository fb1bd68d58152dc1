"""Package factory for tests: valid by default (the article's RTX 3080 x2 package under a
unique id), override what a test is about."""

from __future__ import annotations

from typing import Any

import factory
from factory.django import DjangoModelFactory

from catalog.models import Package

ARTICLE_PACKAGE_ID = "gpu-rtx3080-2x-cpu10-mem40g"


class PackageFactory(DjangoModelFactory):
    """`create()` saves through full_clean(), as the admin and the YAML import do; `build()`
    leaves the package unsaved. `article=True` gives it the article's own id."""

    class Meta:
        model = Package

    class Params:
        article = factory.Trait(id=ARTICLE_PACKAGE_ID)

    id = factory.Sequence(lambda n: f"gpu-rtx3080-2x-p{n}")
    spec_name = "gpu.rtx3080.2x.10c.40g"
    cpu = "10"
    memory = "40Gi"
    gpu = 2
    device_class_name = "nvidia-rtx-3080"
    claim_request_name = "gpu"
    count = 2
    selectors = factory.LazyFunction(list)
    capacity = factory.LazyFunction(dict)

    @classmethod
    def _create(cls, model_class: type[Package], *args: Any, **kwargs: Any) -> Package:
        package = model_class(*args, **kwargs)
        package.full_clean()
        package.save()
        return package
