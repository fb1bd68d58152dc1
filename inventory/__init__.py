"""Inventory: the Postgres mirror of the cluster's observed DRA state."""
