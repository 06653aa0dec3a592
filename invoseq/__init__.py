"""invoseq's wire protocol, shared by the tracer and the repository: ``invoseq.wire``.

The protocol lives outside both ``tracer`` and ``cmr`` so that either side imports it alone:
importing ``invoseq.wire`` runs nothing of the tracer's runtime (``tracer/__init__`` is not
executed), which is what keeps ``cmr`` free of it (docs/architecture.md, "Imports point down").
This package imports nothing: the one setting both sides share without the protocol's code is
here (``cmr --help`` names the endpoint and loads no msgspec).
"""

#: invoseq's version: the distribution's (``pyproject.toml`` reads it from here), so
#: ``tracer --version`` and ``cmr --version`` read no package metadata.
__version__ = "0.1.0"

#: Where the repository listens unless told otherwise (``cmr serve --bind``, ``endpoint``).
DEFAULT_ENDPOINT = "tcp://127.0.0.1:7311"
