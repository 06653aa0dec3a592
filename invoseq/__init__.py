"""invoseq's wire protocol, shared by the tracer and the repository: ``invoseq.wire``.

More in docs/architecture.md, "invoseq/__init__.py".
"""

#: invoseq's version: the distribution's (``pyproject.toml`` reads it from here), so
#: ``tracer --version`` and ``cmr --version`` read no package metadata.
__version__ = "0.1.0"

#: Where the repository listens unless told otherwise (``cmr serve --bind``, ``endpoint``).
DEFAULT_ENDPOINT = "tcp://127.0.0.1:7311"
