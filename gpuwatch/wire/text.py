"""Text on the wire: no string holds U+0000.

PostgreSQL cannot store a NUL character in ``text`` or ``jsonb`` (SQLite can), and a C string
read from a driver (a GPU name, a collector's error message) can carry one. One rule for both
databases, applied to a body before it is validated: every U+0000 is removed from every string
and object key, and the rest of the batch is kept. JSON can only carry the character escaped as
``\\u0000`` (a raw NUL byte is not JSON), so a body without that escape is passed on untouched,
at the cost of one byte search.
"""

from __future__ import annotations

import json
from typing import Any

_ESCAPED_NUL = b"\\u0000"


def without_nul(body: bytes | str) -> bytes | str:
    """``body`` (JSON text) with U+0000 removed from its strings; unchanged when it has none or
    is not JSON (the validator then says why)."""
    raw = body.encode() if isinstance(body, str) else body
    if _ESCAPED_NUL not in raw:
        return body
    try:
        doc = json.loads(raw)
    except ValueError:
        return body
    cleaned = json.dumps(_cleaned(doc), ensure_ascii=False, separators=(",", ":"))
    return cleaned if isinstance(body, str) else cleaned.encode()


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    if isinstance(value, dict):
        return {_cleaned(k): _cleaned(v) for k, v in value.items()}
    return value
