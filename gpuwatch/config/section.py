"""The base of every config section: frozen once loaded, and an unknown key is an error."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """One ``[section]`` (or sub-table) of the TOML file: a typo in a key stops start-up."""

    model_config = ConfigDict(extra="forbid", frozen=True)
