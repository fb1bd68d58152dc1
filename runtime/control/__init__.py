"""The controller: what turns unit and storage rows into cluster objects and brings the rows
back in line with what the cluster holds. `manifests` (the pure builders, at runtime's root so
models and services can name objects) render the objects; `provisioning` creates, rolls out
and tears them down for each operation a worker claims; `status` derives a unit's phase from
its claim and pod; `reconcile` is the one plan-and-apply both the `observer`'s watches and
beat's backstop run; `volumes` is the storages' cluster side. It imports the services
(lifecycle, outbox, selectors), never the API (runtime/api)."""
