"""Scalar decoders and state normalisation."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from gpuwatch.slurm import values as v
from gpuwatch.slurm.model import SlurmJob, normalize_state


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (5, 5),
        ({"set": True, "infinite": False, "number": 7}, 7),
        ({"set": False, "infinite": False, "number": 0}, None),
        ({"set": False, "infinite": True, "number": 0}, None),
        ({"set": True, "infinite": True, "number": 0}, None),
        (4294967294, None),
        (None, None),
        ("5", None),
        (True, None),
        (1.5, 1.5),
    ],
)
def test_number(raw: object, expected: object) -> None:
    assert v.number(raw) == expected


def test_epoch() -> None:
    assert v.epoch(0) is None
    assert v.epoch({"set": True, "infinite": False, "number": 1733140005}) == datetime(
        2024, 12, 2, 11, 46, 45, tzinfo=timezone.utc
    )
    assert v.epoch(-1) is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("00:00:15", 15),
        ("00:30:00", 1800),
        ("1-00:00:00", 86400),
        ("2-03:04:05", 2 * 86400 + 3 * 3600 + 4 * 60 + 5),
        ("1-02", 86400 + 7200),
        ("1-02:03", 86400 + 7200 + 180),
        ("05:30", 330),
        ("30", 1800),
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("", None),
        (None, None),
    ],
)
def test_duration(text: str | None, seconds: int | None) -> None:
    assert v.duration_s(text) == seconds


def test_local_time() -> None:
    tz = timezone(timedelta(hours=2))
    assert v.local_time("2026-12-02T13:30:17", tz) == datetime(2026, 12, 2, 11, 30, 17, tzinfo=timezone.utc)
    assert v.local_time("Unknown") is None
    assert v.local_time("None") is None
    assert v.local_time("garbage") is None
    assert v.local_time("2026-12-02T13:30:17").tzinfo == timezone.utc


@pytest.mark.parametrize(
    ("text", "pair"), [("3:0", (3, None)), ("0:9", (None, 9)), ("0:0", (0, None)), ("", (None, None))]
)
def test_exit_pair(text: str, pair: tuple[int | None, int | None]) -> None:
    assert v.exit_pair(text) == pair


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ("RUNNING", "RUNNING"),
        (["RUNNING"], "RUNNING"),
        (["PENDING", "REQUEUED"], "PENDING"),
        (["COMPLETING", "RUNNING"], "RUNNING"),
        (["COMPLETING"], "COMPLETING"),
        ("CANCELLED by 0", "CANCELLED"),
        ("CANCELLED+", "CANCELLED"),
        ("cancelled", "CANCELLED"),
        ("OOM", "OUT_OF_MEMORY"),
        ("OUT_OF_MEMORY", "OUT_OF_MEMORY"),
        ("PD", "PENDING"),
        ("TO", "TIMEOUT"),
        ("NF", "NODE_FAIL"),
        ("NEW_STATE_2030", "NEW_STATE_2030"),
        ([], None),
        (None, None),
    ],
)
def test_normalize_state(raw: object, state: str | None) -> None:
    assert normalize_state(raw) == state  # type: ignore[arg-type]


def test_job_properties() -> None:
    job = SlurmJob(job_id="29", source="t", array_job_id="28", array_task_id="1", state="COMPLETED")
    assert job.display_id == "28_1"
    assert job.finished
    assert not SlurmJob(job_id="1", source="t", state="RUNNING").finished
    assert SlurmJob(job_id="1", source="t").display_id == "1"
