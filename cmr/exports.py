"""``cmr export`` and ``cmr import``: one sequence out to a file other tools open, or to another
repository.

The formats are one table, ``FORMATS``: each ``Format`` says what it writes (its line in
``cmr export --help``), how (``write``), an example, and what to open the file with; the command's
choices, help and examples are drawn from the table, so a new format is one entry. The text
formats are UTF-8 whatever the terminal's locale: they are files for other programs. The trees
they are drawn from carry the sequence's samples, merged in as estimated calls, when it has any.
Folded stacks are drawn from the sequence's profile lines (``cmr profile``'s, read from the
records) where those can be had: the same stacks, with no node made per call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from cmr.bundle import Body, BundleError, ImportResult, read_bundle, write_bundle
from cmr.otlp.profiles import render_profiles, to_profiles
from cmr.otlp.render import render_otlp
from cmr.otlp.spans import to_trace
from cmr.store.base import SequenceData
from cmr.views.model import SequenceTree
from cmr.views.pipeline import sequence_tree
from cmr.views.render.chrome import render_chrome
from cmr.views.render.firefox import render_firefox
from cmr.views.render.folded import (
    WEIGHT_SAMPLES,
    WEIGHT_TIME,
    folded_lines,
    has_samples,
    profile_folded_stacks,
    profile_has_samples,
    render_folded,
)
from cmr.views.render.speedscope import render_speedscope

#: A text format's renderer: the sequence's tree (samples merged in), its records, and the
#: weight asked for (None unless the format ``takes_weight``) to the text of the file (as
#: UTF-8 bytes where the renderer encodes it itself: a big document is not copied to a str and
#: back).
TextRenderer = Callable[[SequenceTree, SequenceData, "str | None"], "str | bytes"]
#: The same file drawn from the records without the tree where the format can (None: it cannot
#: for these records, and the tree is built).
DirectRenderer = Callable[[SequenceData, "str | None"], "str | bytes | None"]


class ExportError(Exception):
    """A request ``cmr export`` or ``cmr import`` cannot fulfil (a one-line reason)."""


@dataclass(frozen=True)
class Format:
    """One export format: everything ``cmr export`` needs of it, in one place."""

    #: The value of ``--format``.
    name: str
    #: What the file holds, in ``cmr export --help``'s list of formats.
    summary: str
    #: Command lines ``cmr export --help`` shows.
    examples: tuple[str, ...]
    #: What to open the file with, said once it is written.
    open_with: str
    #: A text format's renderer; None for ``bundle``, the records themselves.
    render: TextRenderer | None
    #: Whether ``--weight`` applies (folded's weight by samples or by time).
    takes_weight: bool = False
    #: How far a text format's export has gone once its tree is built, in percent of its time:
    #: what ``cmr export``'s progress estimates the time left by. Measured per format on a
    #: sequence of 100,000 calls with samples (building the tree and merging its samples is
    #: from a quarter of the work, OTLP's spans, to nine tenths, folded stacks).
    tree_share: int = 50
    #: The file drawn straight from the records, no node made per call, where it can be.
    direct: DirectRenderer | None = None

    @property
    def binary(self) -> bool:
        """A binary file (the bundle): standard output only when asked, never to a terminal.
        It moves the records as they are, so the CLI does not fold its empty hand-offs."""
        return self.render is None

    def write(
        self,
        data: SequenceData,
        weight: str | None = None,
        on_step: Callable[[int], object] | None = None,
    ) -> bytes:
        """The file of this format for one sequence's records; ``on_step`` is told the percent
        of the work done once the tree is built (``tree_share``)."""
        if self.render is None:
            return write_bundle(data)
        text = None if self.direct is None else self.direct(data, weight)
        if text is None:
            tree = sequence_tree(data)
            if on_step is not None:
                on_step(self.tree_share)
            text = self.render(tree, data, weight)
        return b"".join((text if isinstance(text, bytes) else text.encode(), b"\n"))


def _otlp(tree: SequenceTree, data: SequenceData, _weight: str | None) -> bytes:
    return render_otlp(to_trace(tree, data))


def _otlp_profiles(tree: SequenceTree, data: SequenceData, _weight: str | None) -> bytes:
    document = to_profiles(tree, data, to_trace(tree, data))
    if document is None:
        raise ExportError(
            f"sequence {data.seq.hex()} has no samples to export as profiles "
            "(sample it with the tracer's sampler on)"
        )
    return render_profiles(document)


def _folded(tree: SequenceTree, data: SequenceData, weight: str | None) -> str:
    if weight == WEIGHT_SAMPLES and not has_samples(tree):
        raise _no_samples(data)
    return render_folded(tree, weight)


def _folded_from_profile(data: SequenceData, weight: str | None) -> str | None:
    """Folded stacks from the sequence's profile lines (``cmr profile``'s, read from the
    records), where they can be had; None: from the tree."""
    from cmr.views.analyses.bigprofile import sequence_profile

    profile = sequence_profile(data)
    if profile is None:
        return None
    sampled = profile_has_samples(profile.roots)
    if weight == WEIGHT_SAMPLES and not sampled:
        raise _no_samples(data)
    chosen = weight or (WEIGHT_SAMPLES if sampled else WEIGHT_TIME)
    return folded_lines(profile_folded_stacks(profile.roots, chosen))


def _no_samples(data: SequenceData) -> ExportError:
    return ExportError(
        f"sequence {data.seq.hex()} has no samples: use --weight time "
        "(sample it with the tracer's sampler on)"
    )


#: Every format, in the order ``cmr export --help`` lists them.
FORMATS: Final = (
    Format(
        name="speedscope",
        summary="a profile per thread, and one per sampled thread, for https://www.speedscope.app",
        examples=("cmr export 3f2a9c --format speedscope -o seq.speedscope.json",),
        open_with="open it at https://www.speedscope.app",
        render=lambda tree, data, _weight: render_speedscope(tree, data),
        tree_share=76,
    ),
    Format(
        name="chrome",
        summary=(
            "the Trace Event Format for https://ui.perfetto.dev or chrome://tracing, with an "
            "arrow per hand-off"
        ),
        examples=("cmr export 3f2a9c --format chrome -o seq.trace.json",),
        open_with="open it at https://ui.perfetto.dev or chrome://tracing",
        render=lambda tree, _data, _weight: render_chrome(tree),
        tree_share=72,
    ),
    Format(
        name="otlp",
        summary=(
            "OTLP/JSON traces for OpenTelemetry backends: a span per call, hand-offs as "
            "parents, estimated calls flagged"
        ),
        examples=("cmr export 3f2a9c --format otlp -o seq.otlp.json",),
        open_with="send it to an OTLP/HTTP receiver, or use 'cmr forward' to push sequences",
        render=_otlp,
        tree_share=28,
    ),
    Format(
        name="otlp-profiles",
        summary=(
            "the stack samples as OTLP/JSON profiles, wall and CPU time, each sample linked to "
            "the span of 'otlp' it was taken under"
        ),
        examples=("cmr export 3f2a9c --format otlp-profiles -o seq.profiles.json",),
        open_with=(
            "send it to an OTLP/HTTP receiver's /v1development/profiles, or use "
            "'cmr forward --profiles'"
        ),
        render=_otlp_profiles,
        tree_share=42,
    ),
    Format(
        name="firefox",
        summary=(
            "the Firefox Profiler's processed profile for https://profiler.firefox.com: a thread "
            "per traced thread, the calls as markers, the samples weighted, an idle stretch "
            "spread over its duration"
        ),
        examples=("cmr export 3f2a9c --format firefox -o seq.firefox.json",),
        open_with="open it at https://profiler.firefox.com (Load a profile from file)",
        render=lambda tree, data, _weight: render_firefox(tree, data),
        tree_share=53,
    ),
    Format(
        name="folded",
        summary="stack lines for flamegraph.pl",
        examples=(
            "cmr export 3f2a9c --format folded | flamegraph.pl > seq.svg",
            "cmr export 3f2a9c --format folded --weight time -o seq.folded",
        ),
        open_with="draw it with flamegraph.pl or inferno-flamegraph",
        render=_folded,
        takes_weight=True,
        tree_share=93,
        direct=_folded_from_profile,
    ),
    Format(
        name="bundle",
        summary="the raw records, compressed, for 'cmr import' into another repository",
        examples=("cmr export 3f2a9c --format bundle -o seq.ivsq",),
        open_with="load it into a repository with 'cmr import'",
        render=None,
    ),
)
#: The formats by name.
BY_NAME: Final = {fmt.name: fmt for fmt in FORMATS}
#: The names, for ``--format``'s choices.
NAMES: Final = tuple(BY_NAME)


def export_sequence(
    data: SequenceData,
    fmt: str,
    *,
    weight: str | None = None,
    on_step: Callable[[int], object] | None = None,
) -> bytes:
    """The file of format ``fmt`` for one sequence's records. ``weight`` is folded's (None: by
    samples when there are some, else by time); ``on_step`` as ``Format.write``'s."""
    format_ = BY_NAME.get(fmt)
    if format_ is None:
        raise ExportError(f"unknown format '{fmt}': choose from {', '.join(NAMES)}")
    if weight is not None and not format_.takes_weight:
        weighted = " or ".join(f"--format {each.name}" for each in FORMATS if each.takes_weight)
        raise ExportError(f"--weight applies to {weighted} only")
    return format_.write(data, weight, on_step)


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
