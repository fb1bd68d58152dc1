"""A simulated Kubernetes API server with DRA allocation, for development and tests."""
