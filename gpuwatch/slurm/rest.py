"""The optional slurmrestd client: the same two questions as :class:`SlurmClient`, over HTTP.

For sites where the daemon host has no Slurm commands (and no ssh to a login node) but can
reach slurmrestd. Two transports:

* ``unix:/run/slurmrestd/slurmrestd.sock`` — slurmrestd's ``rest_auth/local`` on a unix
  socket: the socket's permissions are the authentication (seen working on Debian's 22.05,
  whose slurmrestd has no JWT plugin);
* ``http(s)://host:6820`` — with ``rest_auth/jwt``: ``X-SLURM-USER-NAME`` and
  ``X-SLURM-USER-TOKEN`` headers (a token from ``scontrol token``, read from a file).

``GET /slurm/<v>/jobs`` answers the document ``squeue --json`` prints and
``GET /slurmdb/<v>/jobs?start_time=now-<N>`` the one ``sacct --json`` prints (both from the
same data parser), so the existing parsers read them. A non-empty ``errors`` list, an HTTP
error or an unreachable socket raise :class:`SlurmCommandError`, like a failed command, so the
sync's error handling is the same.
"""

from __future__ import annotations

import http.client
import json
import socket
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlencode

import requests

from gpuwatch.slurm.errors import SlurmCommandError
from gpuwatch.slurm.model import SlurmJob
from gpuwatch.slurm.sacct import parse_sacct_json
from gpuwatch.slurm.squeue import parse_squeue_json

DEFAULT_API = "v0.0.38"  # Slurm 22.05; 23.02+ serve v0.0.39/v0.0.40, 24.05 v0.0.41


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


class SlurmRestClient:
    """``jobs()`` and ``finished_jobs()`` from slurmrestd (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        api_version: str = DEFAULT_API,
        user: str | None = None,
        token: str | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.api = api_version
        self.timeout_s = timeout_s
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["X-SLURM-USER-TOKEN"] = token
            if user:
                self._headers["X-SLURM-USER-NAME"] = user
        self._session = None if self.url.startswith("unix:") else requests.Session()

    def _get(self, path: str, query: dict[str, str] | None = None) -> dict[str, Any]:
        target = path + (f"?{urlencode(query)}" if query else "")
        what = [f"GET {self.url}{target}"]
        try:
            if self._session is None:
                conn = _UnixConnection(self.url[len("unix:") :], self.timeout_s)
                try:
                    conn.request("GET", target, headers=self._headers)
                    response = conn.getresponse()
                    status, body = response.status, response.read()
                finally:
                    conn.close()
            else:
                r = self._session.get(self.url + target, headers=self._headers, timeout=self.timeout_s)
                status, body = r.status_code, r.content
        except (OSError, requests.RequestException) as exc:
            raise SlurmCommandError(what, None, "", f"slurmrestd unreachable: {exc}") from exc
        if status != 200:
            raise SlurmCommandError(what, None, body[-500:].decode("utf-8", "replace"), f"HTTP {status}")
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise SlurmCommandError(what, None, "", f"not JSON: {exc}") from exc
        errors = [e for e in doc.get("errors") or [] if e]
        if errors:
            text = "; ".join(str(e.get("error") or e.get("description") or e) for e in errors)
            raise SlurmCommandError(what, None, "", f"slurmrestd errors: {text}")
        return doc

    def jobs(self) -> list[SlurmJob]:
        """Every job the controller knows, as ``squeue --json --all`` would list them."""
        return parse_squeue_json(self._get(f"/slurm/{self.api}/jobs"))

    def finished_jobs(self, since: datetime, until: datetime | None = None) -> list[SlurmJob]:
        """Jobs from slurmdbd since ``since`` (relative time, so time zones do not matter)."""
        now = datetime.now(timezone.utc)
        query = {"start_time": f"now-{max(0, int((now - since).total_seconds()))}"}
        if until is not None:
            query["end_time"] = f"now-{max(0, int((now - until).total_seconds()))}"
        return parse_sacct_json(self._get(f"/slurmdb/{self.api}/jobs", query))


__all__ = ["SlurmRestClient"]
