"""``cmr ui``: a local web page to find sequences and watch them, served on 127.0.0.1."""

from cmr.ui.server import DEFAULT_PORT, HOST, READY_PREFIX, UIServer, serve

__all__ = ["DEFAULT_PORT", "HOST", "READY_PREFIX", "UIServer", "serve"]
