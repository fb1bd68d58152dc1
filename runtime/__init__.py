"""Runtime: GPU units, their operations and timeline, storage, reservations and tenant secrets.
Services and models at the root, the controller in `control/`, the API in `api/`."""
