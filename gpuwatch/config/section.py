"""The base of every config section, and the one way a section reads a secret from a file."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator

log = logging.getLogger(__name__)


class Section(BaseModel):
    """One ``[section]`` (or sub-table) of the TOML file: a typo in a key stops start-up.

    A key the section no longer has, named in :attr:`RETIRED` with why, is dropped with a
    warning instead, so a config file written for an older version still starts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: retired key -> why it went (and what to do instead)
    RETIRED: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _drop_retired(cls, data: Any) -> Any:
        if not cls.RETIRED or not isinstance(data, dict) or not cls.RETIRED.keys() & data.keys():
            return data
        kept = dict(data)
        for key in cls.RETIRED.keys() & data.keys():
            del kept[key]
            log.warning("config key %s is retired and ignored: %s; remove it", key, cls.RETIRED[key])
        return kept


def secret_of(value: str | None, file: Path | None) -> str | None:
    """``value``, else the first line of ``file``; None when neither is set (or the file is
    empty). An unreadable file raises :class:`OSError`: each caller says what that means."""
    if value:
        return value
    if file is None:
        return None
    return file.read_text().strip() or None
