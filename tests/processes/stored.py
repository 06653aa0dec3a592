"""Reading back what a traced program stored: its sequences and their trees (``cmr`` JSON)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support import cmr_json

#: The shape of a traced ``leaf`` call that ended normally (``tests.support.shape``).
LEAF = {"name": "__main__.leaf", "status": "ok"}


def sequences(db: Path) -> list[dict[str, Any]]:
    return cmr_json(db, "ls", "--limit", "1000")


def tree(db: Path, seq: str) -> dict[str, Any]:
    return cmr_json(db, "show", seq)["root"]
