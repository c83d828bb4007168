"""The real ``gpuwatch agent`` process beside ``prometheus-node-exporter``: CPU and memory.

    .venv/bin/python bench/agent_vs_node_exporter.py [--seconds 60] [--gpus 8] [--interval 1]

Starts both as separate processes for the same wall time and measures each from outside:
CPU time (utime + stime of ``/proc/<pid>/stat``, all threads) over the window, and RSS
(``VmRSS``, peak ``VmHWM`` of ``/proc/<pid>/status``) at its end.

* the agent: ``python -m gpuwatch agent`` with the simulated GPU backend (``--gpus`` GPUs), every
  host collector, ``agent.interval_s = --interval``, pushing to a throwaway daemon - a stub HTTP
  server in this script that answers 200 to every batch, so the agent does its full cycle
  (collect, spool to disk, send, ack) and the daemon's own cost is not counted;
* node_exporter: its default collectors on 127.0.0.1, scraped by this script every
  ``--interval`` s (it collects only when scraped), so both read the machine equally often.

Prints the CPU per cycle of each, the RSS of each, and agent / node_exporter ratios, against the
agent's goals (<= 5 ms CPU per cycle, <= 60 MB RSS). Both binaries must exist:
``tests/prometheus/install.sh`` installs node_exporter. The simulated GPUs cost what the model
costs, not what NVML costs; ``bench/gpu_probe.py`` measures NVML on a real H200.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GOAL_CPU_MS = 5.0
GOAL_RSS_MB = 60.0
NODE_EXPORTER_NAMES = ("prometheus-node-exporter", "node_exporter")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/<pid>/stat."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state is fields[0]
    ticks = int(fields[11]) + int(fields[12])  # stat fields 14 and 15
    return ticks / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """``cpu_seconds`` of a process and every live descendant (a daemon with worker processes)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(text[text.rindex(")") + 2 :].split()[1]), []).append(int(entry.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += cpu_seconds(current)
        except OSError:
            continue
        todo.extend(children.get(current, []))
    return total


def memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MiB (as ps and top show them) from /proc/<pid>/status."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024  # kB -> MiB
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StubDaemon:
    """Answers 200 to every POST and counts them: a daemon that stores nothing."""

    def __init__(self) -> None:
        self.batches = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                stub.batches += 1
                body = b'{"stored": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_agent(daemon_url: str, spool: Path, gpus: int, interval: float) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GPUWATCH_")} | {
        "GPUWATCH_AGENT__DAEMON_URL": daemon_url,
        "GPUWATCH_AGENT__TOKEN": "bench-token",
        "GPUWATCH_AGENT__NODE": "bench",
        "GPUWATCH_AGENT__INTERVAL_S": str(interval),
        "GPUWATCH_AGENT__SPOOL_DIR": str(spool),
        "GPUWATCH_GPU__BACKEND": "sim",
        "GPUWATCH_GPU__SIM_GPUS": str(gpus),
        "GPUWATCH_GPU__SIM_SCENARIO": "training",
        "GPUWATCH_CONFIG": str(spool.parent / "empty.toml"),
    }
    (spool.parent / "empty.toml").write_text("")
    return subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "agent"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(spool.parent / "agent.log").open("w"),
    )


def start_node_exporter(binary: str, port: int, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [binary, f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )


class Scraper:
    """GETs node_exporter's /metrics every ``interval`` s, as a Prometheus would."""

    def __init__(self, url: str, interval: float) -> None:
        self.url = url
        self.interval = interval
        self.scrapes = 0
        self.errors = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    response.read()
                self.scrapes += 1
            except OSError:
                self.errors += 1
            next_at += self.interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self._stop.set()
        self.thread.join()


def wait_until(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except OSError:
        return False


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="measured wall time (after warm-up)")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--interval", type=float, default=1.0, help="agent interval and scrape interval, s")
    ap.add_argument("--warmup", type=float, default=5.0, help="cycles run before measuring")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    binary = next((path for name in NODE_EXPORTER_NAMES if (path := shutil.which(name))), None)
    if binary is None:
        print("prometheus-node-exporter not found; run tests/prometheus/install.sh", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpuwatch-bench-") as tmp:
        work = Path(tmp)
        daemon = StubDaemon()
        port = free_port()
        exporter = start_node_exporter(binary, port, work / "node_exporter.log")
        agent = start_agent(daemon.url, work / "spool", args.gpus, args.interval)
        scraper = Scraper(f"http://127.0.0.1:{port}/metrics", args.interval)
        try:
            wait_until(lambda: ready(f"http://127.0.0.1:{port}/metrics"), 15, "node_exporter")
            scraper.start()
            wait_until(
                lambda: daemon.batches >= 2 or agent.poll() is not None, 60, "the agent's first batches"
            )
            if agent.poll() is not None:
                print((work / "agent.log").read_text(), file=sys.stderr)
                raise SystemExit(f"the agent exited with {agent.returncode}")
            time.sleep(args.warmup)
            t0 = time.monotonic()
            agent_cpu0, exporter_cpu0 = cpu_seconds(agent.pid), cpu_seconds(exporter.pid)
            batches0, scrapes0 = daemon.batches, scraper.scrapes
            time.sleep(args.seconds)
            agent_cpu1, exporter_cpu1 = cpu_seconds(agent.pid), cpu_seconds(exporter.pid)
            wall = time.monotonic() - t0
            batches, scrapes = daemon.batches - batches0, scraper.scrapes - scrapes0
            agent_rss, agent_hwm = memory_mb(agent.pid)
            exporter_rss, exporter_hwm = memory_mb(exporter.pid)
        finally:
            scraper.close()
            stop(agent)
            stop(exporter)
            daemon.close()
    cycles = wall / args.interval
    agent_ms = (agent_cpu1 - agent_cpu0) / max(batches, 1) * 1e3
    exporter_ms = (exporter_cpu1 - exporter_cpu0) / max(scrapes, 1) * 1e3
    figures = {
        "wall_s": round(wall, 2),
        "interval_s": args.interval,
        "gpus": args.gpus,
        "agent_batches": batches,
        "node_exporter_scrapes": scrapes,
        "expected_cycles": round(cycles, 1),
        "agent_cpu_ms_per_cycle": round(agent_ms, 3),
        "node_exporter_cpu_ms_per_scrape": round(exporter_ms, 3),
        "agent_cpu_percent": round((agent_cpu1 - agent_cpu0) / wall * 100, 3),
        "node_exporter_cpu_percent": round((exporter_cpu1 - exporter_cpu0) / wall * 100, 3),
        "agent_rss_mib": round(agent_rss, 1),
        "agent_peak_rss_mib": round(agent_hwm, 1),
        "node_exporter_rss_mib": round(exporter_rss, 1),
        "node_exporter_peak_rss_mib": round(exporter_hwm, 1),
        "cpu_ratio": round(agent_ms / exporter_ms, 3) if exporter_ms else None,
        "rss_ratio": round(agent_rss / exporter_rss, 3) if exporter_rss else None,
    }
    print(f"{wall:.1f} s wall, interval {args.interval:g} s, {args.gpus} simulated GPUs + host collectors")
    print(f"{'':22}{'CPU/cycle':>12}{'CPU %':>9}{'RSS MiB':>10}{'peak MiB':>10}")
    print(
        f"{'gpuwatch agent':22}{agent_ms:>10.2f}ms{figures['agent_cpu_percent']:>9.2f}"
        f"{agent_rss:>10.1f}{agent_hwm:>10.1f}   ({batches} batches sent)"
    )
    print(
        f"{'node_exporter':22}{exporter_ms:>10.2f}ms{figures['node_exporter_cpu_percent']:>9.2f}"
        f"{exporter_rss:>10.1f}{exporter_hwm:>10.1f}   ({scrapes} scrapes)"
    )
    print(f"ratio agent / node_exporter: CPU {figures['cpu_ratio']}x, RSS {figures['rss_ratio']}x")
    print(
        f"goals: CPU <= {GOAL_CPU_MS:g} ms/cycle: {'met' if agent_ms <= GOAL_CPU_MS else 'MISSED'}; "
        f"RSS <= {GOAL_RSS_MB:g} MB: {'met' if agent_rss <= GOAL_RSS_MB else 'MISSED'}"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
