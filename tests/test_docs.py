"""The docs cannot drift: the guide embeds every `--help` verbatim, and names every setting.

Regenerate the help blocks after changing a CLI: `python -m tests.test_docs --write`.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from tracer import config

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guide.md"
BLOCK = re.compile(r"(<!-- help: (?P<command>[^>]+?) -->\n```\n)(?P<body>.*?)(```)", re.S)
#: The integrations table, generated from the registry (``registry.render_table``).
TABLE = re.compile(
    r"(<!-- integrations: [^>]*-->\n)(?P<body>.*?)(<!-- end of integrations -->)", re.S
)


def help_text(command: str) -> str:
    import cmr.cli
    import tracer.run.cli

    program, *rest = command.split()
    main = {"cmr": cmr.cli.main, "tracer": tracer.run.cli.main}[program]
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "100")
        with contextlib.redirect_stdout(out):
            assert main([*rest, "--help"]) == 0
    return out.getvalue()


def rendered(text: str) -> str:
    from tracer._patching.integrations.registry import render_table

    text = BLOCK.sub(lambda m: m.group(1) + help_text(m.group("command")) + m.group(4), text)
    return TABLE.sub(lambda m: m.group(1) + render_table() + m.group(3), text)


#: An option with a value, as argparse before 3.13 lists it (``-o FILE, --output FILE``); 3.13
#: names the value once (``-o, --output FILE``), and the columns and line breaks shift with it.
REPEATED_METAVAR = re.compile(r"(?<!\S)(-\w) (\S+), (--[\w-]+) \2(?!\S)")


def layout_free(text: str) -> str:
    """A help text without its layout: each option's value named once, every run of whitespace
    one space. Every word, option and value stays, in its order."""
    return " ".join(REPEATED_METAVAR.sub(r"\1, \3 \2", text).split())


def test_guide_embeds_the_current_help_of_every_command() -> None:
    """Word for word: the help this Python's argparse prints may be laid out differently from
    the one the guide was written with (``--write`` writes this Python's, verbatim)."""
    text = GUIDE.read_text()
    blocks = {m.group("command"): m.group("body") for m in BLOCK.finditer(text)}
    required = {"tracer run", "tracer info", "cmr", "cmr serve", "cmr ls", "cmr show"}
    required |= {"cmr stats"}
    required |= {"cmr profile", "cmr export", "cmr import"}
    assert required <= set(blocks)
    embedded = {command: layout_free(body) for command, body in blocks.items()}
    current = {command: layout_free(help_text(command)) for command in blocks}
    assert embedded == current, "docs/guide.md is stale: run python -m tests.test_docs --write"


def test_guide_integrations_table_is_the_registrys() -> None:
    """Every integration, its library, supported versions and what it patches, as the registry
    the import watcher and ``tracer info`` read declares them."""
    from tracer._patching.integrations.registry import REGISTRY, render_table

    found = TABLE.search(GUIDE.read_text())
    assert found, "docs/guide.md has no integrations table"
    assert found.group("body") == render_table(), (
        "docs/guide.md's integrations table is stale: run python -m tests.test_docs --write"
    )
    assert all(f"| `{integration.name}` |" in found.group("body") for integration in REGISTRY)


def test_only_the_layout_of_the_help_is_forgiven() -> None:
    before_313 = "  -o FILE, --output FILE\n                        where to write (default: -)\n"
    since_313 = "  -o, --output FILE  where to write\n                     (default: -)\n"
    assert layout_free(before_313) == layout_free(since_313)
    for changed in ("FILE", "write", "-o", "--output", "default"):
        assert layout_free(since_313.replace(changed, "X")) != layout_free(before_313), changed


def test_guide_documents_every_setting_and_its_variable() -> None:
    text = GUIDE.read_text()
    for field in fields(config.Config):
        assert f"`{field.name}`" in text
        assert f"`{config._ENV_NAMES[field.name]}`" in text


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GUIDE.write_text(rendered(GUIDE.read_text()))
