"""The in-memory store (``cmr serve --memory``, tests): ``store`` and its sample reader."""
