from rest_framework.routers import SimpleRouter

from catalog.views import PackageViewSet

router = SimpleRouter(trailing_slash=False)
router.register("packages", PackageViewSet, basename="package")

urlpatterns = router.urls
