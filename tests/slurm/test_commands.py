"""SlurmClient with a fake runner: prefixes, fallbacks, errors."""

from __future__ import annotations

import subprocess
from datetime import datetime, timedelta, timezone

import pytest

from gpuwatch.slurm.commands import SlurmClient
from gpuwatch.slurm.errors import SlurmCommandError, SlurmParseError

from .conftest import V2205


class FakeRunner:
    """Answers by command name; records every argv."""

    def __init__(self, answers: dict[str, subprocess.CompletedProcess[str] | Exception]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        key = " ".join(a for a in argv if not a.startswith("now"))
        for pattern, answer in self.answers.items():
            if pattern in key:
                if isinstance(answer, Exception):
                    raise answer
                return answer
        raise AssertionError(f"unexpected command {argv}")


def ok(stdout: str) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], 0, stdout, "")


def fail(rc: int, stderr: str) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], rc, "", stderr)


def test_jobs_json_with_prefix(ids) -> None:
    runner = FakeRunner({"squeue --json": ok((V2205 / "squeue.json").read_text())})
    client = SlurmClient(prefix=["ssh", "login1"], timeout_s=5, runner=runner)
    jobs = {j.job_id: j for j in client.jobs()}
    assert jobs[ids["gpu2"]].gpu_indices == {"vm": (0, 1)}
    assert runner.calls == [["ssh", "login1", "squeue", "--json", "--all"]]
    assert client.squeue_json is True


def test_jobs_falls_back_to_scontrol_once(ids) -> None:
    runner = FakeRunner(
        {
            "squeue --json": fail(1, "squeue: unrecognized option '--json'\nTry \"squeue --help\""),
            "scontrol show job": ok((V2205 / "scontrol_show_job.txt").read_text()),
        }
    )
    client = SlurmClient(runner=runner)
    assert {j.job_id: j for j in client.jobs()}[ids["gpu2"]].gpu_indices == {"vm": (0, 1)}
    assert client.squeue_json is False
    client.jobs()
    assert [c[0] for c in runner.calls] == ["squeue", "scontrol", "scontrol"]


def test_other_failures_are_raised_with_details() -> None:
    runner = FakeRunner({"squeue": fail(1, "slurm_load_jobs error: Unable to contact slurm controller")})
    with pytest.raises(SlurmCommandError) as info:
        SlurmClient(prefix=["ssh", "x"], runner=runner).jobs()
    err = info.value
    assert err.returncode == 1
    assert err.command[:3] == ["ssh", "x", "squeue"]
    assert "Unable to contact slurm controller" in str(err)


def test_timeout_and_missing_binary() -> None:
    timeout = FakeRunner({"squeue": subprocess.TimeoutExpired(["squeue"], 5, stderr=b"slow")})
    with pytest.raises(SlurmCommandError, match="timed out after 5 s"):
        SlurmClient(timeout_s=5, runner=timeout).jobs()
    missing = FakeRunner({"squeue": FileNotFoundError(2, "No such file", "squeue")})
    with pytest.raises(SlurmCommandError, match="not found"):
        SlurmClient(runner=missing).jobs()


def test_garbage_output_is_a_parse_error() -> None:
    runner = FakeRunner({"squeue": ok("<html>proxy error</html>")})
    with pytest.raises(SlurmParseError):
        SlurmClient(runner=runner).jobs()


def test_finished_jobs_window_and_fallback(ids) -> None:
    runner = FakeRunner(
        {
            "sacct --json": fail(1, "sacct: error: unable to find data_parser plugin"),
            "sacct -a -X -P": ok(
                "25|25|train-gpu2|alice|2001|physics|debug|normal|CANCELLED by 0|0:0|2026-12-02T13:33:16|"
                "2026-12-02T13:33:16|2026-12-02T13:34:02|00:00:46|00:30:00|billing=2,cpu=2,gres/gpu=2,mem=1G,node=1|vm\n"
            ),
        }
    )
    client = SlurmClient(runner=runner)
    since = datetime.now(timezone.utc) - timedelta(hours=1)
    (job,) = client.finished_jobs(since)
    assert (job.job_id, job.state, job.uid, job.gpus) == ("25", "CANCELLED", 2001, 2)
    first = runner.calls[0]
    assert first[:4] == ["sacct", "--json", "-a", "-X"]
    start = first[first.index("-S") + 1]
    assert start.startswith("now-") and start.endswith("seconds")
    assert 3595 <= int(start[4:-7]) <= 3605
    assert first[first.index("-E") + 1] == "now"
    assert client.sacct_json is False


def test_finished_jobs_json(ids) -> None:
    runner = FakeRunner({"sacct --json": ok((V2205 / "sacct.json").read_text())})
    jobs = SlurmClient(runner=runner).finished_jobs(datetime.now(timezone.utc) - timedelta(minutes=5))
    assert {j.job_id for j in jobs} >= {ids["gpu2"], ids["pending"]}


def test_naive_since_is_rejected() -> None:
    with pytest.raises(ValueError):
        SlurmClient(runner=FakeRunner({})).finished_jobs(datetime(2026, 1, 1))


def test_real_subprocess_runner() -> None:
    client = SlurmClient(prefix=["env"], timeout_s=10)
    assert client.run(["echo", "hi"]) == "hi\n"
    with pytest.raises(SlurmCommandError) as info:
        client.run(["sh", "-c", "echo boom >&2; exit 3"])
    assert info.value.returncode == 3 and "boom" in str(info.value)
    with pytest.raises(SlurmCommandError, match="not found"):
        SlurmClient(timeout_s=5).run(["/nonexistent/squeue"])


def test_cluster_goes_to_sacct_as_dash_m() -> None:
    runner = FakeRunner({"sacct --json": ok((V2205 / "sacct.json").read_text())})
    client = SlurmClient(runner=runner, cluster="della")
    client.finished_jobs(datetime.now(timezone.utc) - timedelta(hours=1))
    (argv,) = runner.calls
    assert argv[:5] == ["sacct", "--json", "-a", "-X", "-M"] and argv[5] == "della"
