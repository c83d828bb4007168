"""The base of every config section, and the one way a section reads a secret from a file."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """One ``[section]`` (or sub-table) of the TOML file: a typo in a key stops start-up."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def secret_of(value: str | None, file: Path | None) -> str | None:
    """``value``, else the first line of ``file``; None when neither is set (or the file is
    empty). An unreadable file raises :class:`OSError`: each caller says what that means."""
    if value:
        return value
    if file is None:
        return None
    return file.read_text().strip() or None
