"""Nodes and their ingest tokens.

A token is ``gw1_`` + 32 random bytes (url-safe base64); only its SHA-256 is stored. A
fast hash is right here: the token is random and long, so there is nothing to brute-force
that a slow KDF would protect, and ingest checks a token on every request.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

import sqlalchemy as sa

from gpuwatch.clock import utcnow
from gpuwatch.sql.schema import nodes

TOKEN_PREFIX = "gw1_"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class NodeAuth:
    id: int
    name: str
    token_sha256: str | None


def create_token(engine: sa.Engine, node: str) -> str:
    """Register ``node`` if new and give it a fresh token (the old one stops working)."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = utcnow()
    with engine.begin() as conn:
        existing = conn.execute(sa.select(nodes.c.id).where(nodes.c.name == node)).scalar()
        values = {"token_sha256": hash_token(token), "token_created_at": now}
        if existing is None:
            conn.execute(nodes.insert().values(name=node, created_at=now, **values))
        else:
            conn.execute(nodes.update().where(nodes.c.id == existing).values(**values))
    return token


def get_node(conn: sa.Connection, name: str) -> NodeAuth | None:
    row = conn.execute(
        sa.select(nodes.c.id, nodes.c.name, nodes.c.token_sha256).where(nodes.c.name == name)
    ).first()
    return NodeAuth(*row) if row else None


def node_for_token(conn: sa.Connection, token: str) -> str | None:
    """Name of the node owning ``token``, or None."""
    return conn.execute(sa.select(nodes.c.name).where(nodes.c.token_sha256 == hash_token(token))).scalar()


def token_matches(node: NodeAuth, token: str) -> bool:
    return node.token_sha256 is not None and hmac.compare_digest(node.token_sha256, hash_token(token))
