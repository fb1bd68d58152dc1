"""The only package that imports the `kubernetes` client: connection, errors, helpers."""
