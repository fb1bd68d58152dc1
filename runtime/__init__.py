"""Runtime: tenants, API keys, GPU units and their operations."""
