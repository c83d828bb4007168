"""Loading a Slurm JSON document: the one place that decides "this is not Slurm JSON"."""

from __future__ import annotations

import json
import logging
from typing import Any

from gpuwatch.slurm.errors import SlurmParseError

log = logging.getLogger(__name__)


def load_document(data: str | bytes | dict[str, Any], list_key: str, what: str) -> list[dict[str, Any]]:
    """The ``list_key`` list of a Slurm JSON document (``jobs`` for squeue/sacct).

    Raises :class:`SlurmParseError` when the text is not JSON, not an object, or lacks the
    list; entries that are not objects are dropped (logged). Slurm's own ``errors`` are
    logged as warnings: a partial answer (e.g. one cluster of a federation down) still parses.
    """
    if isinstance(data, (str, bytes, bytearray)):
        try:
            doc = json.loads(data)
        except ValueError as exc:
            head = data[:80] if isinstance(data, str) else bytes(data[:80]).decode("utf-8", "replace")
            raise SlurmParseError(f"{what}: not JSON ({exc}); starts with {head!r}") from exc
    else:
        doc = data
    if not isinstance(doc, dict):
        raise SlurmParseError(f"{what}: top level is {type(doc).__name__}, expected an object")
    items = doc.get(list_key)
    if not isinstance(items, list):
        raise SlurmParseError(f"{what}: no {list_key!r} list at the top level (keys: {sorted(doc)[:10]})")
    for err in doc.get("errors") or []:
        log.warning("%s reported an error: %s", what, err)
    out = [item for item in items if isinstance(item, dict)]
    if len(out) != len(items):
        log.warning("%s: skipped %d non-object entries", what, len(items) - len(out))
    return out
