"""Which node an agent's token belongs to, without a database round trip per request.

Why a copy of the whole nodes table and not an entry per (node, token): an agent holding its
cycles back (``agent.push_every`` 6 at 10 s: a request a minute) comes back after a 30-second
entry has expired, so nearly every steady-state request missed and paid a lookup through the
thread pool (a connection checkout, a ping, a query: ~11 % of the daemon's samples under
``bench/ingest.py --merge 6``, py-spy). One query reads every node's token hash at most once
per ``ttl_s`` (10,000 nodes: one small table scan every 30 s) and each request is a dict look-up.

What it promises is what the per-entry cache promised: a token replaced by ``gpuwatch token
create`` stops working within ``ttl_s`` on every daemon process (the copy is at most that old);
a failure is never remembered, so a new node or a new token works at once (a miss is looked up
on its own and that success remembered for ``ttl_s``).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable

import sqlalchemy as sa

from gpuwatch.sql import nodes as node_store
from gpuwatch.sql.schema import nodes

#: remembered single successes past this many are dropped: more nodes than any cluster, or an attack
MAX_SINGLE_ENTRIES = 100_000


class TokenCache:
    """Successful token checks, from a copy of the nodes table and single look-ups, ``ttl_s`` old at most."""

    def __init__(self, ttl_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        #: node name -> (id, token sha256), as the table was at ``_loaded_at``
        self._table: dict[str, tuple[int, str]] = {}
        self._loaded_at: float | None = None
        self._ok: dict[tuple[str, str], tuple[int, float]] = {}
        self.loads = 0
        #: set while a request reloads the copy (on the event loop: no lock needed)
        self.loading = False

    def get(self, node: str, token: str) -> int | None:
        """The node's id if ``token`` was its token less than ``ttl_s`` ago; else None (look it up)."""
        digest = node_store.hash_token(token)
        if not self.stale():
            known = self._table.get(node)
            if known is not None and hmac.compare_digest(known[1], digest):
                return known[0]
        hit = self._ok.get((node, digest))
        if hit is None or self._clock() - hit[1] > self.ttl_s:
            return None
        return hit[0]

    def put(self, node: str, token: str, node_id: int) -> None:
        """Remember one successful look-up (a node registered after the copy was read)."""
        if len(self._ok) > MAX_SINGLE_ENTRIES:
            self._ok.clear()
        self._ok[(node, node_store.hash_token(token))] = (node_id, self._clock())

    def stale(self) -> bool:
        """No copy of the table, or one older than ``ttl_s``."""
        return self._loaded_at is None or self._clock() - self._loaded_at > self.ttl_s

    def load(self, engine: sa.Engine) -> None:
        """Read every node's token hash (blocking: run it in a thread). The copy's age counts
        from before the query, so a token replaced while it ran is honoured no longer than ``ttl_s``."""
        started = self._clock()
        with engine.connect() as conn:
            query = sa.select(nodes.c.name, nodes.c.id, nodes.c.token_sha256)
            rows = conn.execute(query.where(nodes.c.token_sha256.is_not(None))).all()
        self._table = {name: (node_id, digest) for name, node_id, digest in rows}
        self._loaded_at = started
        self.loads += 1
