"""``cmr ui``: a local web page to find sequences and watch them, served on 127.0.0.1."""

from cmr.ui.server import HOST, UIServer, serve

__all__ = ["HOST", "UIServer", "serve"]
