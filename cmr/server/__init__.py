"""The repository's server: the ZeroMQ socket loop (``server``), typed decoding and storing of
what arrives (``ingest``) and CURVE authentication (``curve``). ``python -m cmr.server`` runs it
without the rest of the CLI."""
