"""Small kernel-generated files (cgroupfs, procfs, sysfs) re-read through fds kept open.

Reading one of these files from offset 0 makes the kernel generate its content again
(``seq_read_iter`` starts over at record 0), so a collector that reads the same file every
cycle can keep it open and ``os.pread(fd, n, 0)`` it: one syscall instead of an open, a
read and a close, and no ``pathlib`` objects. Once the file's cgroup is removed, a read on
its kept fd fails with ENODEV (ENOENT from a fresh open), which callers take as "gone".

Kept fds count against ``RLIMIT_NOFILE`` (a systemd service's soft limit is 1024 unless its
unit says otherwise), so a :class:`FdBudget` caps them; a file past the cap is opened for
each read instead, which is slower but still correct.
"""

from __future__ import annotations

import errno
import os
import resource

#: errnos meaning the file, or the cgroup it belongs to, is not there (ENODEV: removed cgroup)
GONE = frozenset({errno.ENOENT, errno.ENODEV})
#: errnos meaning the process is out of fds: fall back to opening per read
_NO_FDS = frozenset({errno.EMFILE, errno.ENFILE})
#: one read covers every cgroup file the collectors read (``cpu.stat`` is under 1 KiB)
_CHUNK = 4096
_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC


def read_fd(fd: int) -> bytes:
    """The file's whole content, read from offset 0: one ``pread`` for a file under 4 KiB."""
    data = os.pread(fd, _CHUNK, 0)
    if len(data) < _CHUNK:
        return data
    parts = [data]
    offset = len(data)
    while chunk := os.pread(fd, _CHUNK, offset):
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)


def read_once(path: str) -> bytes | None:
    """Open, read and close ``path``; None when it is not there (ENOENT, ENODEV)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno in GONE:
            return None
        raise
    try:
        return read_fd(fd)
    finally:
        os.close(fd)


def default_fd_limit() -> int:
    """Half the process's soft ``RLIMIT_NOFILE``: the other half stays for sockets, spool, NVML."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 65536
    return max(0, soft // 2)


class FdBudget:
    """How many fds a collector may keep open at once, shared by all its files."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = default_fd_limit() if limit is None else limit
        self.used = 0

    def take(self) -> bool:
        """Reserve one fd; False when the budget is spent."""
        if self.used >= self.limit:
            return False
        self.used += 1
        return True

    def give(self) -> None:
        """Return one fd reserved by :meth:`take`."""
        self.used -= 1


class KeptFile:
    """One file read with ``pread`` on a kept fd, or opened per read past the fd budget.

    States after :meth:`open`: kept (``fd`` set), absent (the file was not there: reads
    return None without a syscall) or per-read (no fd to spare). :meth:`open` again retries
    an absent or per-read file and leaves a kept one alone.
    """

    __slots__ = ("_budget", "absent", "fd", "path")

    def __init__(self, path: str, budget: FdBudget) -> None:
        self.path = path
        self.fd: int | None = None
        self.absent = False
        self._budget = budget

    def open(self) -> None:
        """Keep the file open if the budget allows; mark it absent if it is not there."""
        if self.fd is not None:
            return
        self.absent = False
        if not self._budget.take():
            self.absent = not os.path.exists(self.path)
            return
        try:
            self.fd = os.open(self.path, _OPEN_FLAGS)
        except OSError as exc:
            self._budget.give()
            if exc.errno in GONE:
                self.absent = True
            elif exc.errno not in _NO_FDS:
                raise

    def read(self) -> bytes | None:
        """The current content; None if absent when opened.

        Raises OSError with an errno in :data:`GONE` when the file went away after
        :meth:`open` (its cgroup removed).
        """
        if self.fd is not None:
            return read_fd(self.fd)
        if self.absent:
            return None
        fd = os.open(self.path, _OPEN_FLAGS)
        try:
            return read_fd(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Close the kept fd, if any, and return it to the budget (idempotent)."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            self._budget.give()
            os.close(fd)
