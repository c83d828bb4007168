"""A crash-safe, bounded, ordered on-disk queue of serialized batches.

Every batch the agent collects is written here before anything tries to send it, and a
batch leaves the spool only when the daemon has stored it (:meth:`Spool.ack`) or refused
it for good (:meth:`Spool.reject`). Delivery is therefore at-least-once; the daemon
stores a re-sent ``batch_id`` once, so that is correct.

Layout of ``dir``::

    00000000000000000042-<batch_id>.json   one batch per file; lexical order = enqueue order
    .tmp-*                                 a write in progress; removed at open, never replayed
    state.json                             next_seq and the drop counters (written atomically)
    lock                                   flock()ed by the one process that owns the spool
    rejected/<name>.json + <name>.reason   batches the daemon refused, and why

What is guaranteed, and what each failure loses:

* ``kill -9`` / crash / power loss: a batch file is written to a temp file in the same
  directory, flushed, fsync()ed, os.replace()d into its name and the directory fsync()ed,
  so after a crash a batch is either wholly present or not at all (only a temp file,
  deleted at the next open). :meth:`put` returns only after the batch is durable; a crash
  before that loses only that batch. An ack's unlink is not fsync()ed: a power loss just
  after it can bring the batch back, and it is sent again (harmless duplicate).
* A sequence number is never given twice, crash or not: :meth:`reserve_seq` (and
  :meth:`put` without one) writes ``next_seq`` past it to ``state.json`` durably before
  returning it, so a batch lost to a crash while it is collected or written leaves a gap the
  daemon sees. At open the next one is the larger of ``state.json``'s ``next_seq`` and the
  highest file name (pending or rejected) plus one, so order holds even if ``state.json`` is
  lost. The cost is a second small durable write per batch.
* Daemon outage: nothing is lost while the spool has room; batches are replayed oldest
  first once the daemon answers. When a new batch would push the spool past ``max_bytes``,
  the OLDEST batches are deleted to make room and counted in the persistent
  ``dropped_batches_total`` (WARNING in the log). A single batch larger than ``max_bytes``
  is itself dropped and counted.
* Full disk (ENOSPC/EDQUOT): the oldest batches are dropped to free at least the new
  batch's size and the write is retried once; if it still fails, the new batch is dropped
  and counted, an ERROR says the spool's disk is full, and :meth:`put` returns None. Any
  other OSError on write is logged and counted the same way. :meth:`put` never raises
  OSError into the sample loop.
* Bad batch (the daemon answers 400/413/422): it is moved to ``rejected/`` with the reason
  in a sidecar file, not retried and not silently lost. ``rejected/`` is bounded too
  (``rejected_max_bytes``); its oldest entries are deleted first and counted in
  ``rejected_dropped_total``.

A batch that the bound drops while the sender is sending it may still be delivered; it
is counted as dropped anyway (the counter errs towards "lost").

All methods are thread-safe: the sample loop calls :meth:`put` while the sender thread
calls :meth:`peek_oldest`, :meth:`ack` and :meth:`reject`. One process owns a spool at a
time (an exclusive ``flock`` on ``lock``); a second :class:`Spool` on the same directory
raises :class:`SpoolLockedError`.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import threading
from contextlib import suppress
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from gpuwatch.clock import utcnow

log = logging.getLogger(__name__)

TMP_PREFIX = ".tmp-"
STATE_FILE = "state.json"
LOCK_FILE = "lock"
REJECTED_DIR = "rejected"
REASON_SUFFIX = ".reason"
_NAME_RE = re.compile(r"^(\d{20})-([A-Za-z0-9_-]{1,64})\.json$")
_UNSAFE_ID_RE = re.compile(r"[^A-Za-z0-9_-]")
_DISK_FULL = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})


class SpoolLockedError(RuntimeError):
    """Another process (or another open Spool) holds this spool directory."""


@dataclass(frozen=True)
class SpooledBatch:
    """One batch waiting in the spool: where it is and the exact bytes to send."""

    path: Path
    seq: int
    batch_id: str
    data: bytes


def _fsync_dir(directory: Path) -> None:
    """Make a rename/create in ``directory`` durable; filesystems without dir fsync are skipped."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def _write_durable(final: Path, data: bytes) -> None:
    """Write ``data`` to ``final`` so that a crash leaves the old state or the whole new file.

    The bytes go to a temp file beside ``final`` (same filesystem, so os.replace is atomic),
    are fsync()ed, renamed over ``final`` and the directory is fsync()ed. Tests replace this
    function to simulate a full disk.
    """
    directory = final.parent
    tmp = directory / f"{TMP_PREFIX}{final.name}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def _safe_id(batch_id: str) -> str:
    return (_UNSAFE_ID_RE.sub("_", batch_id) or "batch")[:64]


def _batch_id_of(data: bytes) -> str:
    """The batch_id inside serialized batch JSON, for callers that do not pass one."""
    try:
        value = json.loads(data).get("batch_id")
    except (ValueError, AttributeError):
        value = None
    return str(value) if value else "batch"


def _batch_files(folder: Path) -> dict[str, int]:
    """Spooled batch files in ``folder``, name -> size, in name (= seq) order; files that
    vanish while listed (acked meanwhile) are skipped."""
    out: dict[str, int] = {}
    for name in sorted(os.listdir(folder)):
        if _NAME_RE.match(name) is None:
            continue
        with suppress(FileNotFoundError):
            out[name] = (folder / name).stat().st_size
    return out


def _seq_of(name: str) -> int:
    match = _NAME_RE.match(name)
    assert match is not None  # only matching names are listed
    return int(match.group(1))


def _rejected_reason(rejected_dir: Path, name: str) -> str:
    """The reason recorded beside a rejected batch ("" if its sidecar is missing)."""
    try:
        return (rejected_dir / (name + REASON_SUFFIX)).read_text()
    except OSError:
        return ""


def _read_state_file(directory: Path) -> dict:
    """``state.json`` as a dict; raises OSError/ValueError when unreadable, {} when absent."""
    try:
        state = json.loads((directory / STATE_FILE).read_bytes())
    except FileNotFoundError:
        return {}
    return state if isinstance(state, dict) else {}


class Spool:
    """Ordered on-disk queue of serialized batches; see the module docstring for guarantees."""

    def __init__(
        self, directory: Path | str, max_bytes: int, *, rejected_max_bytes: int | None = None
    ) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.dir = Path(directory)
        self.rejected_dir = self.dir / REJECTED_DIR
        self.max_bytes = max_bytes
        self.rejected_max_bytes = rejected_max_bytes if rejected_max_bytes is not None else max_bytes // 4
        self._lock = threading.Lock()
        self._pending: dict[str, int] = {}  # file name -> size, oldest first
        self._rejected: dict[str, int] = {}
        self._bytes = 0
        self._rejected_bytes = 0
        self._next_seq = 0
        self._dropped_total = 0
        self._rejected_dropped_total = 0
        self._disk_full_streak = 0
        self._state_failing = False
        self._lock_fd: int | None = None
        self._open()

    # ----------------------------------------------------------------- open / close

    def _open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.rejected_dir.mkdir(exist_ok=True, mode=0o700)
        fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise SpoolLockedError(f"spool {self.dir} is in use by another agent") from exc
        self._lock_fd = fd

        removed = self._remove_temp_files(self.dir) + self._remove_temp_files(self.rejected_dir)
        if removed:
            log.warning("spool %s: removed %d incomplete write(s) left by a crash", self.dir, removed)

        state = self._read_state()
        self._dropped_total = int(state.get("dropped_batches_total", 0))
        self._rejected_dropped_total = int(state.get("rejected_dropped_total", 0))
        self._pending = _batch_files(self.dir)
        self._rejected = _batch_files(self.rejected_dir)
        highest = max(map(_seq_of, [*self._pending, *self._rejected]), default=-1)
        self._bytes = sum(self._pending.values())
        self._rejected_bytes = sum(self._rejected.values())
        self._next_seq = max(int(state.get("next_seq", 0)), highest + 1)
        if self._bytes > self.max_bytes:  # the bound was lowered since the last run
            with self._lock:
                self._drop_oldest(self._bytes - self.max_bytes, why="spool over max_bytes at open")
        log.info(
            "spool %s: %d batch(es), %d bytes pending, next seq %d",
            self.dir,
            len(self._pending),
            self._bytes,
            self._next_seq,
        )

    @staticmethod
    def _remove_temp_files(directory: Path) -> int:
        removed = 0
        for name in os.listdir(directory):
            if name.startswith(TMP_PREFIX):
                with suppress(FileNotFoundError):
                    os.unlink(directory / name)
                    removed += 1
        return removed

    def _read_state(self) -> dict:
        try:
            return _read_state_file(self.dir)
        except (OSError, ValueError) as exc:
            # cannot happen with atomic writes short of disk corruption; the file names still
            # give the order, only the counters restart
            log.warning("spool %s: unreadable %s (%s); counters restart from 0", self.dir, STATE_FILE, exc)
            return {}

    def _write_state(self) -> None:
        """Persist ``next_seq`` and the counters; a failure is logged (once while it lasts, as on a
        full disk), never raised: the batch files still carry the order."""
        state = {
            "version": 1,
            "next_seq": self._next_seq,
            "dropped_batches_total": self._dropped_total,
            "rejected_dropped_total": self._rejected_dropped_total,
        }
        try:
            _write_durable(self.dir / STATE_FILE, json.dumps(state).encode())
        except OSError as exc:
            level = logging.DEBUG if self._state_failing else logging.ERROR
            log.log(level, "spool %s: cannot write %s: %s", self.dir, STATE_FILE, exc)
            self._state_failing = True
            return
        self._state_failing = False

    def close(self) -> None:
        """Persist the state and release the directory lock so another process may open the spool."""
        with self._lock:
            if self._lock_fd is not None:
                self._write_state()
                os.close(self._lock_fd)  # closing the fd drops the flock
                self._lock_fd = None

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- counters

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    @property
    def bytes_used(self) -> int:
        """Bytes of pending batch files (not state or rejected/): what max_bytes bounds."""
        with self._lock:
            return self._bytes

    @property
    def dropped_total(self) -> int:
        """Batches dropped by the bound or a full disk, ever (persisted across restarts)."""
        with self._lock:
            return self._dropped_total

    @property
    def rejected_dropped_total(self) -> int:
        """Rejected batches deleted to keep rejected/ within its bound, ever."""
        with self._lock:
            return self._rejected_dropped_total

    @property
    def rejected_count(self) -> int:
        with self._lock:
            return len(self._rejected)

    @property
    def next_seq(self) -> int:
        """The sequence number the next :meth:`put` will use."""
        with self._lock:
            return self._next_seq

    # ----------------------------------------------------------------- queue

    def reserve_seq(self) -> int:
        """The next sequence number, persisted as used before it is returned: a crash before its
        batch is in the spool leaves it unused for good, a gap the daemon sees."""
        with self._lock:
            return self._claim(self._next_seq)

    def _claim(self, seq: int) -> int:
        """Make ``seq`` used: ``next_seq`` moves past it, durably, if it is not past it yet."""
        if seq >= self._next_seq:
            self._next_seq = seq + 1
            self._write_state()
        return seq

    def put(self, batch_json: bytes, batch_id: str | None = None, seq: int | None = None) -> Path | None:
        """Durably enqueue one serialized batch as ``seq`` (from :meth:`reserve_seq`; a new one
        if None); None when it had to be dropped.

        Always consumes the sequence number, so a dropped batch leaves a gap in the order.
        Never raises OSError: a full disk or an I/O error is logged and counted.
        """
        name_id = _safe_id(batch_id if batch_id is not None else _batch_id_of(batch_json))
        size = len(batch_json)
        with self._lock:
            seq = self._claim(self._next_seq if seq is None else seq)
            name = f"{seq:020d}-{name_id}.json"
            path = self.dir / name
            if size > self.max_bytes:
                self._dropped_total += 1
                self._write_state()
                log.error(
                    "spool %s: batch %s is %d bytes, more than spool_max_bytes %d; dropped "
                    "(%d dropped in total)",
                    self.dir,
                    name_id,
                    size,
                    self.max_bytes,
                    self._dropped_total,
                )
                return None
            over = self._bytes + size - self.max_bytes
            if over > 0:
                self._drop_oldest(over, why="spool full")
            if not self._write_batch(path, batch_json):
                self._write_state()
                return None
            self._pending[name] = size
            self._bytes += size
            return path

    def _write_batch(self, path: Path, data: bytes) -> bool:
        """Write one batch file, handling a full disk as the module docstring says."""
        try:
            _write_durable(path, data)
        except OSError as exc:
            if exc.errno not in _DISK_FULL:
                self._dropped_total += 1
                log.error(
                    "spool %s: cannot write batch %s: %s; dropped (%d dropped in total)",
                    self.dir,
                    path.name,
                    exc,
                    self._dropped_total,
                )
                return False
            self._drop_oldest(max(len(data), 1), why="spool disk full")
            try:
                _write_durable(path, data)
            except OSError as exc2:
                self._dropped_total += 1
                self._disk_full_streak += 1
                level = logging.ERROR if self._disk_full_streak == 1 else logging.DEBUG
                log.log(
                    level,
                    "spool disk is full: cannot write %s even after dropping the oldest batches (%s); "
                    "new batch dropped (%d dropped in total, %d in a row); free space on the spool's "
                    "filesystem or lower agent.spool_max_bytes",
                    path,
                    exc2,
                    self._dropped_total,
                    self._disk_full_streak,
                )
                return False
        if self._disk_full_streak:
            log.warning(
                "spool %s writable again after %d batch(es) dropped for a full disk",
                self.dir,
                self._disk_full_streak,
            )
            self._disk_full_streak = 0
        return True

    def _drop_oldest(self, need_bytes: int, *, why: str) -> None:
        """Delete oldest pending batches until ``need_bytes`` are freed (or none are left)."""
        freed = count = 0
        while freed < need_bytes and self._pending:
            name = next(iter(self._pending))
            size = self._pending.pop(name)
            with suppress(FileNotFoundError):
                os.unlink(self.dir / name)
            self._bytes -= size
            freed += size
            count += 1
        if count:
            self._dropped_total += count
            self._write_state()  # before the new batch is written, so a crash cannot undercount
            log.warning(
                "%s (%s, max %d bytes): dropped %d oldest batch(es), %d bytes; %d dropped in total",
                why,
                self.dir,
                self.max_bytes,
                count,
                freed,
                self._dropped_total,
            )

    def peek_oldest(self) -> SpooledBatch | None:
        """The oldest pending batch without removing it; None when the spool is empty."""
        oldest = self.peek_oldest_many(1, 0)
        return oldest[0] if oldest else None

    def peek_oldest_many(self, max_batches: int, max_bytes: int) -> list[SpooledBatch]:
        """The oldest pending batches, oldest first, without removing them: at most
        ``max_batches``, and no more than ``max_bytes`` together (but always the oldest one)."""
        with self._lock:
            while True:  # starts again only if a file vanished behind our back
                out = self._read_oldest(max_batches, max_bytes)
                if out is not None:
                    return out

    def _read_oldest(self, max_batches: int, max_bytes: int) -> list[SpooledBatch] | None:
        out: list[SpooledBatch] = []
        size = 0
        for name in list(islice(self._pending, max_batches)):
            if out and size + self._pending[name] > max_bytes:
                break
            path = self.dir / name
            try:
                data = path.read_bytes()
            except FileNotFoundError:  # deleted behind our back: forget it
                self._bytes -= self._pending.pop(name)
                return None
            match = _NAME_RE.match(name)
            assert match is not None  # only matching names enter the index
            out.append(SpooledBatch(path, int(match.group(1)), match.group(2), data))
            size += len(data)
        return out

    def ack(self, path: Path) -> None:
        """Delete a batch the daemon stored. Unknown or already-dropped paths are ignored."""
        with self._lock:
            size = self._pending.pop(path.name, None)
            if size is None:
                log.debug("spool %s: ack of %s, which is no longer pending", self.dir, path.name)
                return
            self._bytes -= size
            with suppress(FileNotFoundError):
                os.unlink(self.dir / path.name)

    def reject(self, path: Path, reason: str) -> Path | None:
        """Move a batch the daemon refused for good to rejected/, with ``reason`` beside it.

        Returns the new path, or None when the batch was no longer pending or could not be kept.
        """
        with self._lock:
            name = path.name
            size = self._pending.pop(name, None)
            if size is None:
                log.debug("spool %s: reject of %s, which is no longer pending", self.dir, name)
                return None
            self._bytes -= size
            over = self._rejected_bytes + size - self.rejected_max_bytes
            if over > 0:
                self._drop_oldest_rejected(over)
            target = self.rejected_dir / name
            sidecar = self.rejected_dir / (name + REASON_SUFFIX)
            text = f"rejected_at: {utcnow().isoformat()}\nreason: {reason}\n"
            try:
                _write_durable(sidecar, text.encode())
            except OSError as exc:
                log.error("spool %s: cannot write reason for %s (%s): %s", self.dir, name, reason, exc)
            try:
                os.replace(self.dir / name, target)
                _fsync_dir(self.rejected_dir)
            except OSError as exc:
                # keeping it pending would retry a bad batch forever; the log keeps the reason
                log.error("spool %s: cannot move rejected %s (%s): %s; deleted", self.dir, name, reason, exc)
                with suppress(OSError):
                    os.unlink(self.dir / name)
                self._rejected_dropped_total += 1
                self._write_state()
                return None
            self._rejected[name] = size
            self._rejected_bytes += size
            return target

    def _drop_oldest_rejected(self, need_bytes: int) -> None:
        freed = count = 0
        while freed < need_bytes and self._rejected:
            name = next(iter(self._rejected))
            freed += self._rejected.pop(name)
            count += 1
            for victim in (name, name + REASON_SUFFIX):
                with suppress(FileNotFoundError):
                    os.unlink(self.rejected_dir / victim)
        if count:
            self._rejected_bytes -= freed
            self._rejected_dropped_total += count
            self._write_state()
            log.warning(
                "spool %s: rejected/ over %d bytes: deleted %d oldest rejected batch(es); %d in total",
                self.dir,
                self.rejected_max_bytes,
                count,
                self._rejected_dropped_total,
            )

    def requeue_rejected(self) -> tuple[int, int]:
        """Move rejected batches back to pending, oldest first, while they fit in ``max_bytes``.

        For after the cause is fixed (a daemon upgraded to a newer wire version, a database
        constraint lifted): the agent sends them again in seq order before newer batches, and
        the daemon stores each once. Returns (requeued, left in rejected/).
        """
        moved = 0
        with self._lock:
            for name in list(self._rejected):
                size = self._rejected[name]
                if self._bytes + size > self.max_bytes:
                    break
                os.replace(self.rejected_dir / name, self.dir / name)
                with suppress(FileNotFoundError):
                    os.unlink(self.rejected_dir / (name + REASON_SUFFIX))
                del self._rejected[name]
                self._rejected_bytes -= size
                self._pending[name] = size
                self._bytes += size
                moved += 1
            if moved:
                _fsync_dir(self.dir)
                _fsync_dir(self.rejected_dir)
                self._pending = dict(sorted(self._pending.items()))  # seq order: names sort by seq
            left = len(self._rejected)
        if moved:
            log.info("spool %s: %d rejected batch(es) requeued, %d left in rejected/", self.dir, moved, left)
        return moved, left

    def rejected(self) -> list[tuple[Path, str]]:
        """Rejected batches oldest first, with their recorded reason (for the CLI and tests)."""
        with self._lock:
            names = list(self._rejected)
        return [(self.rejected_dir / name, _rejected_reason(self.rejected_dir, name)) for name in names]


@dataclass(frozen=True)
class SpoolStatus:
    """What a spool holds, read without taking its lock (the agent may be running)."""

    directory: Path
    pending: int
    pending_bytes: int
    oldest_seq: int | None
    newest_seq: int | None
    dropped_batches_total: int
    rejected: list[tuple[str, str]]  # file name, reason (the sidecar's text)
    rejected_dropped_total: int


def read_status(directory: Path | str) -> SpoolStatus:
    """A snapshot of ``directory`` for ``gpuwatch spool status``; files vanishing meanwhile are skipped."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"no spool at {directory}")

    pending = _batch_files(directory)
    rejected_dir = directory / REJECTED_DIR
    rejected_names = _batch_files(rejected_dir) if rejected_dir.is_dir() else {}
    rejected = [(name, _rejected_reason(rejected_dir, name).strip()) for name in rejected_names]
    try:
        state = _read_state_file(directory)
    except (OSError, ValueError):
        state = {}
    seqs = [_seq_of(name) for name in pending]
    return SpoolStatus(
        directory=directory,
        pending=len(pending),
        pending_bytes=sum(pending.values()),
        oldest_seq=min(seqs, default=None),
        newest_seq=max(seqs, default=None),
        dropped_batches_total=int(state.get("dropped_batches_total", 0)),
        rejected=rejected,
        rejected_dropped_total=int(state.get("rejected_dropped_total", 0)),
    )
