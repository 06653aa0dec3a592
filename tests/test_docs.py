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


def help_text(command: str) -> str:
    import cmr.cli
    import tracer.cli

    program, *rest = command.split()
    main = {"cmr": cmr.cli.main, "tracer": tracer.cli.main}[program]
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "100")
        with contextlib.redirect_stdout(out):
            assert main([*rest, "--help"]) == 0
    return out.getvalue()


def rendered(text: str) -> str:
    return BLOCK.sub(lambda m: m.group(1) + help_text(m.group("command")) + m.group(4), text)


def test_guide_embeds_the_current_help_of_every_command() -> None:
    text = GUIDE.read_text()
    commands = [m.group("command") for m in BLOCK.finditer(text)]
    required = {"tracer run", "cmr", "cmr serve", "cmr ls", "cmr show", "cmr stats"}
    required |= {"cmr profile", "cmr export", "cmr import"}
    assert required <= set(commands)
    assert text == rendered(text), "docs/guide.md is stale: run python -m tests.test_docs --write"


def test_guide_documents_every_setting_and_its_variable() -> None:
    text = GUIDE.read_text()
    for field in fields(config.Config):
        assert f"`{field.name}`" in text
        assert f"`{config._ENV_NAMES[field.name]}`" in text


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GUIDE.write_text(rendered(GUIDE.read_text()))
