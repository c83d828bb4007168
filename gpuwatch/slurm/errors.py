"""Exceptions of the Slurm package, kept apart so every module can raise them without cycles."""

from __future__ import annotations


class SlurmError(Exception):
    """Base class: anything that went wrong talking to, or reading, Slurm."""


class SlurmParseError(SlurmError):
    """The text is not what the parser expects at all (not JSON, wrong top-level shape).

    Raised only for the document as a whole: a single odd job or field inside a good
    document is logged and skipped or left ``None``, so one strange job cannot hide the rest.
    """


class SlurmCommandError(SlurmError):
    """A Slurm command failed: it could not start, timed out, or exited non-zero."""

    def __init__(self, command: list[str], returncode: int | None, stderr: str, reason: str = "") -> None:
        self.command = list(command)
        self.returncode = returncode
        self.stderr_tail = stderr[-2000:]
        self.reason = reason or (f"exit code {returncode}" if returncode is not None else "failed")
        tail = self.stderr_tail.strip().splitlines()[-3:]
        msg = f"{' '.join(self.command)}: {self.reason}"
        if tail:
            msg += ": " + " | ".join(tail)
        super().__init__(msg)
