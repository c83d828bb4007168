"""The daemon's token cache: one read of the nodes table per ``ttl_s``, rotation honoured within it."""

from __future__ import annotations

import pytest

from gpuwatch.daemon.token_cache import TokenCache
from gpuwatch.sql.nodes import create_token


@pytest.fixture
def sqlite_engine(sqlite_url):
    from tests.conftest import migrated_engine

    with migrated_engine(sqlite_url) as eng:
        yield eng


def test_one_load_answers_every_node_until_it_is_ttl_old(sqlite_engine) -> None:
    now = [0.0]
    cache = TokenCache(ttl_s=30.0, clock=lambda: now[0])
    tokens = {f"n{i}": create_token(sqlite_engine, f"n{i}") for i in range(5)}
    assert cache.stale() and cache.get("n0", tokens["n0"]) is None
    cache.load(sqlite_engine)
    ids = {node: cache.get(node, token) for node, token in tokens.items()}
    assert None not in ids.values() and len(set(ids.values())) == 5
    assert cache.get("n0", tokens["n1"]) is None  # another node's token
    assert cache.get("n0", "gw_wrong") is None
    now[0] = 30.5
    assert cache.stale() and cache.get("n0", tokens["n0"]) is None
    assert cache.loads == 1


def test_a_replaced_token_stops_working_at_the_next_load_and_a_new_one_works_at_once(sqlite_engine) -> None:
    now = [0.0]
    cache = TokenCache(ttl_s=30.0, clock=lambda: now[0])
    old = create_token(sqlite_engine, "n0")
    cache.load(sqlite_engine)
    new = create_token(sqlite_engine, "n0")
    assert cache.get("n0", old) is not None  # within ttl_s of the copy
    assert cache.get("n0", new) is None  # not in the copy: looked up on its own, then remembered
    cache.put("n0", new, 1)
    assert cache.get("n0", new) == 1
    now[0] = 31.0
    cache.load(sqlite_engine)
    assert cache.get("n0", old) is None
    assert cache.get("n0", new) is not None
