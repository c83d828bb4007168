"""The daemon serves ingest on uvicorn's C stack by default, and on the pure-Python one if asked."""

from __future__ import annotations

import pytest
import requests

from gpuwatch.config import load_settings
from gpuwatch.daemon.server import BackgroundServer
from gpuwatch.sql.nodes import create_token
from tests import factories


def test_auto_means_httptools_and_uvloop():
    """Both are dependencies, so 'auto' must resolve to them (else h11 and asyncio, slower)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    assert AutoHTTPProtocol is HttpToolsProtocol
    uvloop = pytest.importorskip("uvloop")  # absent only on Windows
    from uvicorn.loops.auto import auto_loop_factory

    loop = auto_loop_factory()()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    settings = load_settings(None, database={"url": "sqlite://"})
    assert (settings.daemon.http_parser, settings.daemon.event_loop) == ("auto", "auto")


@pytest.mark.parametrize(("parser", "loop"), [("auto", "auto"), ("httptools", "uvloop"), ("h11", "asyncio")])
def test_ingest_works_on_each_stack(tmp_path, parser, loop):
    settings = load_settings(
        None,
        database={"url": f"sqlite:///{tmp_path / 'gpuwatch.db'}"},
        daemon={"listen": "127.0.0.1:0", "http_parser": parser, "event_loop": loop},
    )
    with BackgroundServer(settings) as daemon:
        token = create_token(daemon.engine, "node001")
        body = factories.batch().model_dump_json()
        auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        first = requests.post(f"{daemon.url}/api/v1/ingest/node001", data=body, headers=auth, timeout=10)
        again = requests.post(f"{daemon.url}/api/v1/ingest/node001", data=body, headers=auth, timeout=10)
        assert daemon.server.config.http == parser and daemon.server.config.loop == loop
    assert (first.status_code, first.json()["status"]) == (200, "stored")
    assert again.json()["status"] == "duplicate"


def test_an_unknown_parser_is_a_config_error():
    with pytest.raises(Exception, match="http_parser"):
        load_settings(None, daemon={"http_parser": "fast"})
