"""The embedded SQLite store, the default: connect, schema, migrate, ingest (``store``), read,
samples."""
