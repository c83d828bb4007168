"""Run Slurm's commands (locally or through a prefix such as ``ssh login1``) and parse them.

The daemon asks once per cycle for the whole cluster: ``squeue --json --all`` (all
partitions, all users), falling back to ``scontrol show job -d -o`` where the JSON plugins are
missing (builds without ``libjson-c``/data_parser, Slurm < 20.11), and ``sacct`` for jobs that
ended. The client remembers that ``--json`` is missing so it does not fail every cycle.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

from gpuwatch.slurm.errors import SlurmCommandError, SlurmParseError
from gpuwatch.slurm.model import SlurmJob
from gpuwatch.slurm.sacct import DEFAULT_FIELDS, parse_sacct_json, parse_sacct_parsable
from gpuwatch.slurm.scontrol import parse_scontrol_jobs
from gpuwatch.slurm.squeue import parse_squeue_json

log = logging.getLogger(__name__)

Runner = Callable[[list[str], float], "subprocess.CompletedProcess[str]"]

# stderr of a Slurm command that does not know --json (getopt) or lacks the plugin for it.
_NO_JSON_HINTS = (
    "unrecognized option",
    "invalid option",
    "unknown option",
    "data_parser",
    "serializer",
    "json",
)


def _subprocess_runner(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout_s, check=False, stdin=subprocess.DEVNULL
    )


def _json_unsupported(err: SlurmCommandError) -> bool:
    return err.returncode not in (None, 0) and any(h in err.stderr_tail.lower() for h in _NO_JSON_HINTS)


class SlurmClient:
    """One cluster's Slurm, reached by running its commands.

    ``prefix`` is prepended to every command (``["ssh", "login1"]``, ``["sudo", "-u",
    "slurm"]``); with ssh the remote command line is the words joined by spaces, so arguments
    here never contain spaces or shell characters. ``timeout_s`` bounds each command: a hung
    ``slurmctld`` must not stall the daemon's cycle.
    """

    def __init__(
        self,
        prefix: Sequence[str] = (),
        timeout_s: float = 60.0,
        runner: Runner | None = None,
        cluster: str | None = None,
    ) -> None:
        self.prefix = list(prefix)
        #: ``sacct -M <cluster>`` for a slurmdbd serving several clusters
        self.cluster_args = ["-M", cluster] if cluster else []
        self.timeout_s = timeout_s
        self._runner = runner or _subprocess_runner
        self.squeue_json: bool | None = None  # None: not tried yet
        self.sacct_json: bool | None = None

    def run(self, argv: Sequence[str]) -> str:
        """Stdout of ``prefix + argv``; :class:`SlurmCommandError` if it cannot run, times out or fails."""
        cmd = [*self.prefix, *argv]
        log.debug("running %s", cmd)
        try:
            proc = self._runner(cmd, self.timeout_s)
        except FileNotFoundError as exc:
            raise SlurmCommandError(cmd, None, "", f"not found: {exc.filename or cmd[0]}") from exc
        except subprocess.TimeoutExpired as exc:
            stderr = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else exc.stderr
            raise SlurmCommandError(cmd, None, stderr or "", f"timed out after {self.timeout_s:g} s") from exc
        except OSError as exc:
            raise SlurmCommandError(cmd, None, "", f"cannot run: {exc}") from exc
        if proc.returncode != 0:
            raise SlurmCommandError(cmd, proc.returncode, proc.stderr or "")
        return proc.stdout or ""

    def _json(self, argv: list[str], answers: bool | None, fallback: str) -> tuple[bool, str | None]:
        """Whether this Slurm answers ``argv`` (a ``--json`` command) and its output; where it is
        too old (``answers`` False: known from an earlier try), False and None: the caller runs
        ``fallback``. Any other failure raises."""
        if answers is False:
            return False, None
        try:
            return True, self.run(argv)
        except SlurmCommandError as err:
            if not _json_unsupported(err):
                raise
            log.warning("%s unsupported (%s); using %s", " ".join(argv[:2]), err, fallback)
            return False, None

    def jobs(self) -> list[SlurmJob]:
        """Every job the controller knows (pending, running, and recently ended ones).

        ``squeue --json --all``; if that is unsupported, ``scontrol show job -d -o`` (which
        also carries per-node GPU ``IDX``). A document that does not parse raises
        :class:`SlurmParseError` (no silent fallback: that would hide a format change).
        """
        self.squeue_json, out = self._json(
            ["squeue", "--json", "--all"], self.squeue_json, "scontrol show job -d -o"
        )
        if out is not None:
            return parse_squeue_json(out)
        return parse_scontrol_jobs(self.run(["scontrol", "show", "job", "-d", "-o"]))

    def finished_jobs(self, since: datetime, until: datetime | None = None) -> list[SlurmJob]:
        """Jobs of all users that were eligible/ran between ``since`` and ``until`` (default now).

        Times are sent as ``now-<N>seconds`` so the cluster's time zone does not matter.
        ``sacct --json`` first; ``sacct -P -n -X`` with :data:`DEFAULT_FIELDS` if unsupported.
        """
        now = datetime.now(timezone.utc)
        window = [
            *self.cluster_args,
            "-S",
            _relative(since, now),
            "-E",
            _relative(until, now) if until else "now",
        ]
        self.sacct_json, out = self._json(
            ["sacct", "--json", "-a", "-X", *window], self.sacct_json, "sacct -P"
        )
        if out is not None:
            return parse_sacct_json(out)
        fields = ",".join(DEFAULT_FIELDS)
        out = self.run(["sacct", "-a", "-X", "-P", "-n", *window, "-o", fields])
        return parse_sacct_parsable(out, DEFAULT_FIELDS)


def _relative(when: datetime, now: datetime) -> str:
    """``now-<N>seconds`` for an aware datetime (sacct's relative time form, tz-independent)."""
    if when.tzinfo is None:
        raise ValueError("sacct window times must be timezone-aware")
    seconds = int((now - when).total_seconds())
    return f"now-{seconds}seconds" if seconds > 0 else f"now+{-seconds}seconds"


__all__ = ["SlurmClient", "SlurmCommandError", "SlurmParseError"]
