"""``cmr export`` and ``cmr import``: one sequence out to a file other tools open, or to another
repository.

Formats: ``speedscope`` (https://www.speedscope.app), ``chrome`` (Perfetto, chrome://tracing),
``otlp`` (OTLP/JSON traces, for OpenTelemetry backends), ``otlp-profiles`` (the samples as
OTLP/JSON profiles, each linked to the span of ``otlp`` it was taken under), ``firefox`` (the
Firefox Profiler's processed profile: the calls as markers, the samples weighted), ``folded``
(flamegraph.pl, inferno) and ``bundle`` (the raw records, for ``cmr import``). The text formats
are UTF-8 whatever the terminal's locale: they are files for other programs. The trees they are
drawn from carry the sequence's samples, merged in as estimated calls, when it has any."""

from __future__ import annotations

from typing import Final

from cmr.bundle import Body, BundleError, ImportResult, read_bundle, write_bundle
from cmr.otlp.profiles import render_profiles, to_profiles
from cmr.otlp.render import render_otlp
from cmr.otlp.spans import to_trace
from cmr.store.base import SequenceData
from cmr.views.pipeline import sequence_tree
from cmr.views.render.chrome import render_chrome
from cmr.views.render.firefox import render_firefox
from cmr.views.render.folded import WEIGHT_SAMPLES, has_samples, render_folded
from cmr.views.render.speedscope import render_speedscope

SPEEDSCOPE: Final = "speedscope"
CHROME: Final = "chrome"
OTLP: Final = "otlp"
OTLP_PROFILES: Final = "otlp-profiles"
FIREFOX: Final = "firefox"
FOLDED: Final = "folded"
BUNDLE: Final = "bundle"
FORMATS: Final = (SPEEDSCOPE, CHROME, OTLP, OTLP_PROFILES, FIREFOX, FOLDED, BUNDLE)
#: What to open each file with, said once it is written.
OPEN_WITH: Final = {
    SPEEDSCOPE: "open it at https://www.speedscope.app",
    CHROME: "open it at https://ui.perfetto.dev or chrome://tracing",
    OTLP: "send it to an OTLP/HTTP receiver, or use 'cmr forward' to push sequences",
    OTLP_PROFILES: (
        "send it to an OTLP/HTTP receiver's /v1development/profiles, or use "
        "'cmr forward --profiles'"
    ),
    FIREFOX: "open it at https://profiler.firefox.com (Load a profile from file)",
    FOLDED: "draw it with flamegraph.pl or inferno-flamegraph",
    BUNDLE: "load it into a repository with 'cmr import'",
}
#: Stands for standard input or output.


class ExportError(Exception):
    """A request ``cmr export`` or ``cmr import`` cannot fulfil (a one-line reason)."""


def export_sequence(data: SequenceData, fmt: str, *, weight: str | None = None) -> bytes:
    """The file of format ``fmt`` for one sequence's records. ``weight`` is folded's (None: by
    samples when there are some, else by time)."""
    if weight is not None and fmt != FOLDED:
        raise ExportError("--weight applies to --format folded only")
    if fmt == BUNDLE:
        return write_bundle(data)
    tree = sequence_tree(data)
    if fmt == SPEEDSCOPE:
        text = render_speedscope(tree, data)
    elif fmt == CHROME:
        text = render_chrome(tree)
    elif fmt == OTLP:
        text = render_otlp(to_trace(tree, data))
    elif fmt == OTLP_PROFILES:
        document = to_profiles(tree, data, to_trace(tree, data))
        if document is None:
            raise ExportError(
                f"sequence {data.seq.hex()} has no samples to export as profiles "
                "(sample it with the tracer's sampler on)"
            )
        text = render_profiles(document)
    elif fmt == FIREFOX:
        text = render_firefox(tree, data)
    elif fmt == FOLDED:
        if weight == WEIGHT_SAMPLES and not has_samples(tree):
            raise ExportError(
                f"sequence {data.seq.hex()} has no samples: use --weight time "
                "(sample it with the tracer's sampler on)"
            )
        text = render_folded(tree, weight)
    else:
        raise ExportError(f"unknown format '{fmt}': choose from {', '.join(FORMATS)}")
    return (text + "\n").encode()


def load_bundle(source: str, blob: bytes) -> Body:
    """The checked bundle read from ``source``: refused before any repository is opened."""
    try:
        return read_bundle(blob)
    except BundleError as exc:
        raise ExportError(f"{source}: {exc}") from None


def describe_import(result: ImportResult) -> str:
    """The line ``cmr import`` prints."""
    processes = "process" if result.processes == 1 else "processes"
    return (
        f"imported sequence {result.seq.hex()} ({result.processes} {processes}): "
        f"{result.stored} of {result.batches} batches new"
    )
