"""A real daemon process (``python -m gpuwatch daemon``) that tests and benchmarks start and kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

from tests.conftest import free_port


class DaemonProcess:
    def __init__(
        self, db_url: str, log_path: Path, env: dict[str, str] | None = None, source: Path | None = None
    ) -> None:
        """``source``: run the ``gpuwatch`` package of that tree (a benchmark's baseline), not this one."""
        self.db_url = db_url
        self.extra_env = env or {}
        self.source = source
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def agent_env(
        self, node: str, token: str, spool_dir: Path, *, gpus: int, interval_s: float, **agent: str
    ) -> dict[str, str]:
        """The environment of a ``gpuwatch agent`` process on ``gpus`` simulated GPUs pushing to
        this daemon; ``agent`` adds agent settings by name (``backoff_max_s="0.2"``)."""
        env = dict(
            os.environ,
            GPUWATCH_AGENT__NODE=node,
            GPUWATCH_AGENT__DAEMON_URL=self.url,
            GPUWATCH_AGENT__TOKEN=token,
            GPUWATCH_AGENT__INTERVAL_S=f"{interval_s:g}",
            GPUWATCH_AGENT__SPOOL_DIR=str(spool_dir),
            GPUWATCH_GPU__BACKEND="sim",
            GPUWATCH_GPU__SIM_GPUS=str(gpus),
            GPUWATCH_AGENT__PUSH_EVERY="1",  # a push per cycle, unless a test says otherwise
            **{f"GPUWATCH_AGENT__{name.upper()}": value for name, value in agent.items()},
        )
        env.pop("GPUWATCH_CONFIG", None)
        return env

    def start(self, timeout_s: float = 30) -> None:
        env = dict(
            os.environ,
            GPUWATCH_DAEMON__LISTEN=f"127.0.0.1:{self.port}",
            GPUWATCH_DB=self.db_url,
            **self.extra_env,
        )
        env.pop("GPUWATCH_CONFIG", None)
        if self.source is not None:  # ``-m`` looks in the working directory first
            env["PYTHONPATH"] = str(self.source)
        with self.log_path.open("ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpuwatch", "daemon"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.source,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"daemon exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}"
                )
            try:
                if requests.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"daemon not healthy after {timeout_s} s: {self.log_path.read_text()[-2000:]}")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
