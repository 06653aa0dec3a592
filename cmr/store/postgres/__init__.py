"""The PostgreSQL store for several nodes: connect, schema, migrate, partitions, ingest, read,
prune (``store``)."""
