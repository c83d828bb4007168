"""Slow chunked uploads (no Content-Length) with a valid node token: a real daemon process holds
no more of their bodies than ``daemon.max_inflight_bytes`` allows, whatever the timing, and
still takes a normal batch afterwards.

Fifty uploads go round-robin over raw sockets, one 64 KiB chunk each per round, so every body
is unfinished while the others arrive: a daemon that counts a chunked body only once it is
whole would hold all fifty (~190 MiB here). The figure asserted is the daemon's peak RSS over
the uploads (``VmHWM`` of ``/proc/<pid>/status``, reset before them): it does not depend on how
fast the machine is, only on what the daemon kept.
"""

from __future__ import annotations

import contextlib
import select
import socket
from collections import Counter
from pathlib import Path

import pytest
import requests

from gpuwatch.clock import utcnow
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.nodes import create_token
from tests import factories
from tests.daemon_process import DaemonProcess

pytestmark = pytest.mark.slow

MiB = 1024 * 1024
INFLIGHT = 8 * MiB
MAX_BATCH = 4 * MiB
UPLOADS = 50
CHUNK = 64 * 1024
CHUNKS = 60  # 3.75 MiB a body: under max_batch_bytes, so only the in-flight bound stops them
#: what the daemon may add over the bound: the body joined once read (a second copy), what uvicorn
#: and the kernel buffer per connection, the allocator's slack
MARGIN = 2 * INFLIGHT + 24 * MiB
NODE = "chunky"


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def _reset_peak(pid: int) -> bool:
    """Reset the process's VmHWM to its current RSS (Linux >= 4.0, same user)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _open_upload(port: int, token: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(
        (
            f"POST /api/v2/ingest/{NODE} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        ).encode()
    )
    return sock


def _status_line(sock: socket.socket) -> int:
    """The HTTP status the daemon answered on ``sock`` (0: closed without an answer)."""
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n" not in data:
            more = sock.recv(4096)
            if not more:
                break
            data += more
    parts = data.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def _answered(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def _storm(port: int, token: str) -> Counter:
    """Fifty unfinished chunked bodies, round-robin; each finished at the end if still open.
    Returns the statuses the daemon answered."""
    frame = f"{CHUNK:x}\r\n".encode() + b"x" * CHUNK + b"\r\n"
    open_ = {i: _open_upload(port, token) for i in range(UPLOADS)}
    statuses: Counter = Counter()
    for _ in range(CHUNKS):
        for i, sock in list(open_.items()):
            try:
                if _answered(sock):
                    raise ConnectionError("answered before its body was finished")
                sock.sendall(frame)
            except OSError:  # refused mid-body: the daemon answered and closed the connection
                statuses[_status_line(sock)] += 1
                sock.close()
                del open_[i]
    for sock in open_.values():
        with contextlib.suppress(OSError):
            sock.sendall(b"0\r\n\r\n")
        statuses[_status_line(sock)] += 1
        sock.close()
    return statuses


def test_slow_chunked_uploads_stay_within_the_inflight_bound(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'gpuwatch.db'}")
    migrate.upgrade(engine)
    token = create_token(engine, NODE)
    daemon = DaemonProcess(
        engine.url.render_as_string(hide_password=False),
        tmp_path / "daemon.log",
        env={
            "GPUWATCH_DAEMON__MAX_INFLIGHT_BYTES": str(INFLIGHT),
            "GPUWATCH_DAEMON__MAX_BATCH_BYTES": str(MAX_BATCH),
        },
    )
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    url = f"{daemon.url}/api/v1/ingest/{NODE}"
    daemon.start()
    try:
        pid = daemon.proc.pid
        warm = factories.batch(NODE, start=utcnow().replace(microsecond=0, second=10)).model_dump_json()
        assert requests.post(url, data=warm, headers=headers, timeout=30).json()["status"] == "stored"
        if not _reset_peak(pid):
            pytest.skip("cannot reset the daemon's VmHWM (/proc/<pid>/clear_refs)")
        before = _status_kib(pid, "VmRSS")
        statuses = _storm(daemon.port, token)
        grown = (_status_kib(pid, "VmHWM") - before) * 1024
        after = factories.batch(NODE, start=utcnow().replace(microsecond=0, second=20)).model_dump_json()
        answer = requests.post(url, data=after, headers=headers, timeout=30)
    finally:
        daemon.stop()
    print(
        f"\n{UPLOADS} slow chunked uploads of {CHUNKS * CHUNK / MiB:.2f} MiB: daemon peak RSS "
        f"+{grown / MiB:.1f} MiB over {before / 1024:.0f} MiB (bound {INFLIGHT / MiB:.0f} MiB, "
        f"allowed +{(INFLIGHT + MARGIN) / MiB:.0f}); answers {dict(statuses)}"
    )
    assert grown <= INFLIGHT + MARGIN, f"daemon grew by {grown / MiB:.1f} MiB"
    # shed (503; 0: the connection reset before its answer could be read), finished and found not
    # JSON (400), or too slow for body_timeout_s on a very busy machine (408)
    assert set(statuses) <= {0, 400, 408, 503} and statuses[503] > 0, statuses
    assert answer.status_code == 200 and answer.json()["status"] == "stored"
