"""API plumbing shared by every app: the response envelope, errors, schema helpers."""
