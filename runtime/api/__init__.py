"""The HTTP edge of the runtime: DRF views, the input and output serializers, the routes. It
parses requests, calls the services (orders, actions, lifecycle, storage, logs) and renders
what they return; it never reaches into the controller (runtime/control)."""
