"""Developer launcher: embedded PostgreSQL/Redis and the processes behind `make run` / `make test`.

Nothing in the product imports this package; it only sets the environment the product reads.
"""
