"""``tracer run``'s bootstrap for the Python processes a traced program starts.

More in docs/architecture.md, "tracer/run/bootstrap/sitecustomize.py".
"""

import os
import sys

_VARIABLE = "INVOSEQ_RUN_INCLUDE"


def _same_directory(entry: object, directory: str) -> bool:
    if not isinstance(entry, str) or not entry:
        return False
    try:
        return os.path.realpath(entry) == directory
    except (OSError, ValueError):
        return False


def _warn(reason: str) -> None:
    try:
        import logging

        logging.getLogger("tracer").warning(
            "invoseq: tracer run cannot trace this process (%s): it runs untraced", reason
        )
    except Exception:  # no way left to report it: the child must start all the same
        return


def _our_tracer(directory: str) -> bool:
    """Whether ``import tracer`` gives the package this file belongs to (never import another
    module named ``tracer``: it could be the program's own)."""
    import importlib.util

    package = os.path.dirname(os.path.dirname(directory))  # tracer/run/bootstrap -> tracer
    expected = os.path.join(package, "__init__.py")
    loaded = sys.modules.get("tracer")
    origin = getattr(loaded, "__file__", None) if loaded is not None else None
    if loaded is None:
        spec = importlib.util.find_spec("tracer")
        origin = None if spec is None else spec.origin
    if origin is None:
        _warn("this interpreter cannot import the tracer: " + sys.executable)
        return False
    if os.path.realpath(origin) != os.path.realpath(expected):
        _warn("this interpreter imports another 'tracer': " + origin)
        return False
    return True


def _bootstrap(directory: str) -> None:
    try:
        if not _our_tracer(directory):
            return
        from tracer.run.bootstrap import start

        start()  # reports its own failures (counted, logged once): only the import can raise
    except Exception as exc:
        _warn(type(exc).__name__ + ": " + str(exc))


def _chain() -> None:
    """Import the ``sitecustomize`` this one hides, the one ``site`` would have imported."""
    import importlib

    ours = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")  # the next one on sys.path, now ours is off it
    except ModuleNotFoundError as exc:
        if exc.name != "sitecustomize":
            raise  # the other sitecustomize's own error, reported by site as it would be
        if ours is not None:
            sys.modules["sitecustomize"] = ours


def _main() -> None:
    directory = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:] = [entry for entry in sys.path if not _same_directory(entry, directory)]
    if os.environ.get(_VARIABLE):
        _bootstrap(directory)
    _chain()


if __name__ == "sitecustomize":  # imported by site, not as tracer.run.bootstrap.sitecustomize
    _main()
