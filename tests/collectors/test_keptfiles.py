"""Kept-open files: pread from offset 0, the per-read fallback past the fd budget, absence."""

from __future__ import annotations

import errno
import os

import pytest

from gpuwatch.collectors.keptfiles import FdBudget, KeptFile, default_fd_limit, read_fd, read_once


def test_read_fd_sees_each_new_content_from_the_start(tmp_path):
    path = tmp_path / "memory.current"
    path.write_text("100\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert read_fd(fd) == b"100\n"
        path.write_text("2000\n")  # rewritten in place, as the kernel regenerates it
        assert read_fd(fd) == b"2000\n"
        big = "".join(f"line {i}\n" for i in range(2000))  # past one 4 KiB read
        path.write_text(big)
        assert read_fd(fd) == big.encode()
    finally:
        os.close(fd)


def test_read_once(tmp_path):
    (tmp_path / "memory.max").write_text("max\n")
    assert read_once(str(tmp_path / "memory.max")) == b"max\n"
    assert read_once(str(tmp_path / "absent")) is None
    with pytest.raises(IsADirectoryError):
        read_once(str(tmp_path))


def test_kept_file_holds_one_fd_of_the_budget_until_closed(tmp_path):
    (tmp_path / "cpu.stat").write_text("usage_usec 1\n")
    budget = FdBudget(1)
    kept = KeptFile(str(tmp_path / "cpu.stat"), budget)
    kept.open()
    kept.open()  # already kept: no second fd
    assert (kept.fd is not None, budget.used) == (True, 1)
    assert kept.read() == b"usage_usec 1\n"
    kept.close()
    kept.close()
    assert (kept.fd, budget.used) == (None, 0)


def test_past_the_budget_a_file_is_opened_per_read(tmp_path):
    (tmp_path / "a").write_text("1\n")
    (tmp_path / "b").write_text("2\n")
    budget = FdBudget(1)
    a, b = KeptFile(str(tmp_path / "a"), budget), KeptFile(str(tmp_path / "b"), budget)
    a.open()
    b.open()
    assert (a.fd is not None, b.fd, b.absent) == (True, None, False)
    assert b.read() == b"2\n"
    a.close()
    b.open()  # an fd is free again: b keeps one now
    assert b.fd is not None
    b.close()


def test_absent_file_reads_none_until_reopened(tmp_path):
    path = tmp_path / "memory.swap.current"
    for budget in (FdBudget(4), FdBudget(0)):
        kept = KeptFile(str(path), budget)
        kept.open()
        assert (kept.absent, kept.read(), budget.used) == (True, None, 0)
        path.write_text("0\n")
        kept.open()
        assert (kept.absent, kept.read()) == (False, b"0\n")
        kept.close()
        path.unlink()


def test_a_per_read_file_that_went_away_raises_enoent(tmp_path):
    path = tmp_path / "memory.current"
    path.write_text("1\n")
    kept = KeptFile(str(path), FdBudget(0))
    kept.open()
    path.unlink()
    with pytest.raises(OSError) as raised:
        kept.read()
    assert raised.value.errno == errno.ENOENT


def test_default_fd_limit_leaves_half_the_soft_limit():
    assert 0 < default_fd_limit() <= 65536


def test_out_of_fds_at_open_falls_back_to_opening_per_read(tmp_path, monkeypatch):
    path = tmp_path / "cpuacct.usage"
    path.write_text("5\n")
    real_open = os.open

    def no_fds(file, flags, *args, **kwargs):
        if str(file) == str(path):
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), str(file))
        return real_open(file, flags, *args, **kwargs)

    budget = FdBudget(4)
    kept = KeptFile(str(path), budget)
    monkeypatch.setattr(os, "open", no_fds)
    kept.open()
    monkeypatch.undo()
    assert (kept.fd, kept.absent, budget.used) == (None, False, 0)
    assert kept.read() == b"5\n"
