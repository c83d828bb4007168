"""Spool: order, bound, crash safety, full disk, rejected/."""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from gpuwatch.agent import spool as spool_mod
from gpuwatch.agent.spool import Spool, SpoolLockedError

MonkeyPatch = pytest.MonkeyPatch
LogCapture = pytest.LogCaptureFixture


def batch(seq: int, pad: int = 0) -> tuple[bytes, str]:
    batch_id = str(uuid.uuid4())
    return json.dumps({"batch_id": batch_id, "seq": seq, "pad": "x" * pad}).encode(), batch_id


def fill(spool: Spool, n: int, pad: int = 0) -> list[str]:
    ids = []
    for i in range(n):
        data, batch_id = batch(i, pad)
        assert spool.put(data, batch_id) is not None
        ids.append(batch_id)
    return ids


def drain_ids(spool: Spool) -> list[str]:
    ids = []
    while (item := spool.peek_oldest()) is not None:
        ids.append(json.loads(item.data)["batch_id"])
        spool.ack(item.path)
    return ids


def test_put_peek_ack_in_order(tmp_path: Path) -> None:
    with Spool(tmp_path, 1 << 20) as spool:
        ids = fill(spool, 5)
        assert len(spool) == 5
        assert spool.bytes_used == sum(
            p.stat().st_size for p in tmp_path.glob("*.json") if p.name != "state.json"
        )
        item = spool.peek_oldest()
        assert item is not None and item.batch_id == ids[0] and item.seq == 0
        assert spool.peek_oldest() == item  # peek does not remove
        assert drain_ids(spool) == ids
        assert len(spool) == 0 and spool.bytes_used == 0
        assert spool.peek_oldest() is None


def test_peek_oldest_many_bounded_by_count_and_bytes(tmp_path: Path) -> None:
    with Spool(tmp_path, 1 << 20) as spool:
        ids = fill(spool, 6, pad=100)
        size = spool.bytes_used // 6
        assert [i.batch_id for i in spool.peek_oldest_many(4, 1 << 20)] == ids[:4]
        assert [i.batch_id for i in spool.peek_oldest_many(10, int(size * 2.5))] == ids[:2]
        # the oldest comes even if it alone is over the byte bound: it must be sent some day
        assert [i.batch_id for i in spool.peek_oldest_many(10, 1)] == ids[:1]
        assert len(spool) == 6  # peeking removes nothing
        # a file deleted behind the spool's back is forgotten, and the next ones come instead
        spool.peek_oldest_many(1, 0)[0].path.unlink()
        many = spool.peek_oldest_many(3, 1 << 20)
        assert [i.batch_id for i in many] == ids[1:4] and len(spool) == 5
        assert all(json.loads(i.data)["batch_id"] == i.batch_id for i in many)
        for item in many:
            spool.ack(item.path)
        assert drain_ids(spool) == ids[4:]


def test_file_names_sort_in_enqueue_order(tmp_path: Path) -> None:
    with Spool(tmp_path, 1 << 20) as spool:
        paths = [spool.put(*batch(i)) for i in range(12)]
    names = [p.name for p in paths if p is not None]
    assert names == sorted(names)
    assert names[0].startswith("0" * 20 + "-")


def test_batch_id_read_from_json_when_not_given(tmp_path: Path) -> None:
    data, batch_id = batch(0)
    with Spool(tmp_path, 1 << 20) as spool:
        path = spool.put(data)
    assert path is not None and path.name.endswith(f"-{batch_id}.json")


def test_pending_batches_and_seq_survive_reopen(tmp_path: Path) -> None:
    with Spool(tmp_path, 1 << 20) as spool:
        ids = fill(spool, 3)
        last = spool.next_seq
    with Spool(tmp_path, 1 << 20) as spool:
        assert spool.next_seq == last
        assert drain_ids(spool) == ids
    # emptied before the restart: the state file still carries the sequence
    with Spool(tmp_path, 1 << 20) as spool:
        assert len(spool) == 0
        path = spool.put(*batch(9))
    assert path is not None and int(path.name[:20]) == last


def test_seq_from_highest_file_when_state_is_lost(tmp_path: Path) -> None:
    with Spool(tmp_path, 1 << 20) as spool:
        fill(spool, 4)
    (tmp_path / "state.json").unlink()
    with Spool(tmp_path, 1 << 20) as spool:
        assert spool.next_seq == 4


def test_second_open_of_same_dir_is_refused(tmp_path: Path) -> None:
    with Spool(tmp_path, 1 << 20), pytest.raises(SpoolLockedError):
        Spool(tmp_path, 1 << 20)
    Spool(tmp_path, 1 << 20).close()  # released on close


def test_bound_drops_oldest_and_counts_persistently(tmp_path: Path, caplog: LogCapture) -> None:
    one = len(batch(0, 1000)[0])
    with Spool(tmp_path, one * 3) as spool:
        ids = fill(spool, 5, pad=1000)
        assert len(spool) == 3
        assert spool.bytes_used <= one * 3
        assert spool.dropped_total == 2
        assert "dropped 1 oldest batch(es)" in caplog.text
        assert any(r.levelno == logging.WARNING for r in caplog.records)
    with Spool(tmp_path, one * 3) as spool:
        assert spool.dropped_total == 2
        assert drain_ids(spool) == ids[2:]
        fill(spool, 4, pad=1000)
        assert spool.dropped_total == 3


def test_lowered_bound_applies_at_open(tmp_path: Path) -> None:
    one = len(batch(0, 1000)[0])
    with Spool(tmp_path, one * 10) as spool:
        ids = fill(spool, 6, pad=1000)
    with Spool(tmp_path, one * 2) as spool:
        assert spool.dropped_total == 4
        assert drain_ids(spool) == ids[4:]


def test_batch_larger_than_bound_is_dropped(tmp_path: Path, caplog: LogCapture) -> None:
    with Spool(tmp_path, 5000) as spool:
        kept = fill(spool, 1)
        assert spool.put(*batch(1, pad=6000)) is None
        assert spool.dropped_total == 1
        assert drain_ids(spool) == kept
    assert "more than spool_max_bytes" in caplog.text


def test_temp_files_from_a_crash_are_removed_and_never_replayed(tmp_path: Path) -> None:
    with Spool(tmp_path, 1 << 20) as spool:
        ids = fill(spool, 2)
    # what a kill -9 in the middle of _write_durable leaves behind
    (tmp_path / ".tmp-00000000000000000002-abc.json.123").write_bytes(b'{"batch_id": "abc", "pa')
    (tmp_path / "rejected" / ".tmp-00000000000000000001-x.json.reason.9").write_bytes(b"rej")
    (tmp_path / "notes.txt").write_text("not a batch")
    with Spool(tmp_path, 1 << 20) as spool:
        assert not [p for p in tmp_path.rglob(".tmp-*")]
        assert len(spool) == 2
        assert drain_ids(spool) == ids
    assert (tmp_path / "notes.txt").exists()  # foreign files are left alone


def _fail_writes(monkeypatch: MonkeyPatch, err: int, times: int | None = None) -> list[Path]:
    """Make batch writes fail with ``err`` (``times`` times, or always); state writes still work."""
    real = spool_mod._write_durable
    failed: list[Path] = []

    def fake(final: Path, data: bytes) -> None:
        if final.name != spool_mod.STATE_FILE and (times is None or len(failed) < times):
            failed.append(final)
            raise OSError(err, os.strerror(err), str(final))
        real(final, data)

    monkeypatch.setattr(spool_mod, "_write_durable", fake)
    return failed


def test_disk_full_drops_oldest_and_retries_once(
    tmp_path: Path, monkeypatch: MonkeyPatch, caplog: LogCapture
) -> None:
    with Spool(tmp_path, 1 << 20) as spool:
        ids = fill(spool, 3, pad=100)
        failed = _fail_writes(monkeypatch, errno.ENOSPC, times=1)
        data, new_id = batch(3, pad=100)
        assert spool.put(data, new_id) is not None
        assert len(failed) == 1
        assert spool.dropped_total == 1  # the oldest made room
        assert drain_ids(spool) == [*ids[1:], new_id]
    assert "spool disk full" in caplog.text


def test_disk_still_full_counts_new_batch_and_never_raises(
    tmp_path: Path, monkeypatch: MonkeyPatch, caplog: LogCapture
) -> None:
    with Spool(tmp_path, 1 << 20) as spool:
        fill(spool, 2, pad=100)
        failed = _fail_writes(monkeypatch, errno.ENOSPC)
        with caplog.at_level(logging.DEBUG):
            assert spool.put(*batch(2, pad=100)) is None
            assert spool.put(*batch(3, pad=100)) is None
        assert len(failed) == 4  # each put: first try + one retry
        assert spool.dropped_total == 2 + 2  # the two old ones (made room) + the two new ones
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "spool disk is full" in errors[0].getMessage()
        monkeypatch.undo()
        assert spool.put(*batch(4)) is not None
        assert "writable again" in caplog.text
        seq = spool.next_seq
    with Spool(tmp_path, 1 << 20) as spool:
        assert spool.dropped_total == 4  # the state file was writable: persisted
        assert spool.next_seq == seq


def test_edquot_is_treated_as_disk_full(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    with Spool(tmp_path, 1 << 20) as spool:
        fill(spool, 1)
        _fail_writes(monkeypatch, errno.EDQUOT, times=1)
        assert spool.put(*batch(1)) is not None
        assert spool.dropped_total == 1


def test_other_write_errors_drop_the_new_batch_only(
    tmp_path: Path, monkeypatch: MonkeyPatch, caplog: LogCapture
) -> None:
    with Spool(tmp_path, 1 << 20) as spool:
        ids = fill(spool, 2)
        failed = _fail_writes(monkeypatch, errno.EIO, times=1)
        assert spool.put(*batch(2)) is None
        assert len(failed) == 1  # no retry for EIO
        assert spool.dropped_total == 1
        assert drain_ids(spool) == ids
    assert "cannot write batch" in caplog.text


def test_every_write_failing_including_state_never_raises(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    with Spool(tmp_path, 1 << 20) as spool:

        def always(final: Path, data: bytes) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(spool_mod, "_write_durable", always)
        assert spool.put(*batch(0)) is None
        assert spool.dropped_total == 1


def test_reject_moves_batch_with_reason(tmp_path: Path) -> None:
    with Spool(tmp_path, 1 << 20) as spool:
        ids = fill(spool, 2)
        item = spool.peek_oldest()
        assert item is not None
        target = spool.reject(item.path, "HTTP 422: samples.0.ts: bad")
        assert target is not None and target.parent == tmp_path / "rejected"
        assert json.loads(target.read_bytes())["batch_id"] == ids[0]
        assert "HTTP 422" in (tmp_path / "rejected" / (target.name + ".reason")).read_text()
        assert not item.path.exists()
        assert drain_ids(spool) == ids[1:]
        assert spool.reject(item.path, "again") is None  # no longer pending: ignored
    with Spool(tmp_path, 1 << 20) as spool:
        assert len(spool) == 0
        [(path, reason)] = spool.rejected()
        assert path == target and "HTTP 422" in reason


def test_rejected_dir_is_bounded(tmp_path: Path) -> None:
    one = len(batch(0, 500)[0])
    with Spool(tmp_path, 1 << 20, rejected_max_bytes=one * 2) as spool:
        fill(spool, 5, pad=500)
        while (item := spool.peek_oldest()) is not None:
            spool.reject(item.path, "bad")
        assert spool.rejected_count == 2
        assert spool.rejected_dropped_total == 3
        names = sorted(p.name for p in (tmp_path / "rejected").iterdir())
        assert len(names) == 4  # two batches + two reasons, the newest ones
        assert names[0].startswith("00000000000000000003-")
    with Spool(tmp_path, 1 << 20, rejected_max_bytes=one * 2) as spool:
        assert spool.rejected_dropped_total == 3
        assert spool.rejected_count == 2


def test_ack_of_a_batch_dropped_meanwhile_is_harmless(tmp_path: Path) -> None:
    one = len(batch(0, 1000)[0])
    with Spool(tmp_path, one * 2) as spool:
        fill(spool, 1, pad=1000)
        item = spool.peek_oldest()
        assert item is not None
        fill(spool, 2, pad=1000)  # drops the one being "sent"
        spool.ack(item.path)
        assert len(spool) == 2


_WRITER = textwrap.dedent(
    """
    import json, sys, uuid
    from gpuwatch.agent.spool import Spool

    spool = Spool(sys.argv[1], int(sys.argv[2]))
    pad = "x" * int(sys.argv[3])
    i = 0
    while True:
        batch_id = str(uuid.uuid4())
        spool.put(json.dumps({"batch_id": batch_id, "n": i, "pad": pad}).encode(), batch_id)
        if i == 0:
            print("ready", flush=True)
        i += 1
    """
)


def test_kill_9_mid_write_leaves_a_consistent_spool(tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    pad = 2 * 1024 * 1024
    max_bytes = 12 * pad
    rng = random.Random(1234)
    last_seq = -1
    for _ in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(spool_dir), str(max_bytes), str(pad)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.05, 0.3))
        finally:
            child.kill()  # SIGKILL
            child.wait(10)
            if child.stdout is not None:
                child.stdout.close()
        with Spool(spool_dir, max_bytes) as spool:
            assert not list(spool_dir.rglob(".tmp-*"))
            names = sorted(p.name for p in spool_dir.glob("0*.json"))
            assert len(names) == len(spool) > 0
            assert spool.bytes_used <= max_bytes
            seqs = [int(name[:20]) for name in names]
            # the writer continued the sequence after the previous kill (the seq of the write a
            # kill interrupted may be skipped or reused: that write never became a file)
            assert len(set(seqs)) == len(seqs) and seqs[-1] > last_seq
            for name in names:
                doc = json.loads((spool_dir / name).read_bytes())  # whole, valid JSON
                assert name.endswith(f"-{doc['batch_id']}.json")
                assert len(doc["pad"]) == pad
            assert spool.next_seq > seqs[-1]
            json.loads((spool_dir / "state.json").read_bytes())
            last_seq = seqs[-1]


def test_requeue_puts_rejected_batches_back_in_seq_order(tmp_path: Path) -> None:
    with Spool(tmp_path, 1 << 20) as spool:
        ids = fill(spool, 3)  # seq 0, 1, 2
        for _ in range(2):
            item = spool.peek_oldest()
            assert item is not None and spool.reject(item.path, "HTTP 400: unsupported schema_version")
        data, newest = batch(3)
        spool.put(data, newest)
        assert [json.loads(p.read_bytes())["batch_id"] for p, _ in spool.rejected()] == ids[:2]
        assert spool.requeue_rejected() == (2, 0)
        assert spool.rejected() == [] and not list((tmp_path / "rejected").iterdir())  # reasons too
        assert len(spool) == 4
    with Spool(tmp_path, 1 << 20) as spool:  # on disk, not only in memory
        assert drain_ids(spool) == [*ids, newest]


def test_requeue_stops_where_the_spool_is_full(tmp_path: Path) -> None:
    with Spool(tmp_path, 2500, rejected_max_bytes=3000) as spool:
        fill(spool, 2, pad=900)
        for _ in range(2):
            item = spool.peek_oldest()
            assert item is not None and spool.reject(item.path, "bad")
        data, batch_id = batch(2, pad=900)
        spool.put(data, batch_id)  # ~1 kB of 2.5 kB used: room for one more
        assert spool.requeue_rejected() == (1, 1)
        assert len(spool) == 2 and spool.bytes_used <= 2500 and len(spool.rejected()) == 1


def test_status_reads_a_spool_in_use(tmp_path: Path) -> None:
    with Spool(tmp_path, 1 << 20) as spool:
        fill(spool, 3)
        item = spool.peek_oldest()
        assert item is not None
        spool.reject(item.path, "HTTP 422 for this batch: the database refused this batch")
        status = spool_mod.read_status(tmp_path)  # the lock is held: read-only, no lock taken
    assert (status.pending, status.oldest_seq, status.newest_seq) == (2, 1, 2)
    assert status.pending_bytes == sum(p.stat().st_size for p in tmp_path.glob("0*.json"))
    [(name, reason)] = status.rejected
    assert name.startswith("0" * 20) and "the database refused this batch" in reason
    with pytest.raises(FileNotFoundError):
        spool_mod.read_status(tmp_path / "missing")
