"""create_engine: a PostgreSQL server that never answers is an error in seconds, not a hang."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import sqlalchemy as sa

from gpuwatch.sql import engine as engine_mod
from gpuwatch.sql.engine import create_engine


@pytest.fixture
def silent_server():
    """A TCP port whose kernel completes the handshake and whose 'server' never says a word
    (a hung PostgreSQL, or a proxy in front of a dead one)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    for conn in accepted:
        conn.close()
    listener.close()


def _connect_seconds(url: str) -> tuple[float, BaseException | None]:
    """How long connecting takes, and how it fails; gives up waiting after 60 s."""
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        engine = create_engine(url)
        try:
            with engine.connect():
                outcome.append(None)
        except Exception as exc:
            outcome.append(exc)
        finally:
            engine.dispose()

    started = time.monotonic()
    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(timeout=60)
    return time.monotonic() - started, (outcome[0] if outcome else TimeoutError("still connecting"))


def test_a_silent_server_fails_within_the_connect_timeout(silent_server, monkeypatch):
    monkeypatch.setattr(engine_mod, "CONNECT_TIMEOUT_S", 2)
    seconds, error = _connect_seconds(f"postgresql+psycopg://gpuwatch@127.0.0.1:{silent_server}/gpuwatch")
    assert isinstance(error, sa.exc.OperationalError), error
    assert seconds < 30, f"took {seconds:.0f} s: the timeout did not apply"


def test_the_url_s_own_connect_timeout_wins(silent_server, monkeypatch):
    monkeypatch.setattr(engine_mod, "CONNECT_TIMEOUT_S", 600)
    url = f"postgresql+psycopg://gpuwatch@127.0.0.1:{silent_server}/gpuwatch?connect_timeout=2"
    seconds, error = _connect_seconds(url)
    assert isinstance(error, sa.exc.OperationalError) and seconds < 30, (seconds, error)
