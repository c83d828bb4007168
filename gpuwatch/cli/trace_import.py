"""``gpuwatch import``: placeholder, filled in below."""

from __future__ import annotations

import click


def register(cli: click.Group) -> None:
    pass
