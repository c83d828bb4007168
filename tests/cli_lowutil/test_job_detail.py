"""``gpuwatch job ID`` on SQLite and PostgreSQL: text, timeline, JSON and the PNG plot."""

from __future__ import annotations

import json
import struct
from datetime import datetime, timezone

import pytest
from click.testing import CliRunner

from gpuwatch.classify.verdict import TEXTS, Cause
from gpuwatch.cli.job_detail import BLOCKS, spark
from gpuwatch.cli.main import cli
from gpuwatch.cli.plot import utilization_figure
from tests.classify import corpus
from tests.cli_lowutil.conftest import job_of

AT = corpus.T0.replace(minute=15).isoformat()


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_text_has_cause_evidence_fix_and_timeline(classified) -> None:
    url, built = classified
    jid = job_of(built, "idle-all-4-h200")
    result = run("--db", url, "job", jid, "--at", AT)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "idle_allocation" in out and "all 4 GPUs idle" in out
    assert "      - GPUs allocated: 4." in out  # the evidence, in sentences
    assert "      - Highest GPU utilization over the whole job: 0%." in out
    assert TEXTS[Cause.IDLE_ALLOCATION].fix in out
    assert "140.4 GiB" in out and "/ 700 " in out and "power W mean / limit" in out  # H200 memory, limit
    lines = [ln for ln in out.splitlines() if ln.strip().startswith(f"c{jid[-2:]}n0:")]
    assert len(lines) == 4  # one timeline line per GPU
    bar = lines[0].split("|")[1]
    assert set(bar) == {"▁"} and len(bar) == 16  # idle: lowest block, one column per minute (08:00..08:15)


def test_timeline_levels_and_json(classified) -> None:
    url, built = classified
    jid = job_of(built, "healthy-training-h200")
    data = json.loads(run("--db", url, "job", jid, "--at", AT, "--format", "json").output)
    assert data["job"]["raw_job_id"] == jid and data["job"]["user"] == "alice"
    assert {v["cause"] for v in data["verdicts"]} == {"healthy"}
    assert len(data["gpus"]) == 4 and all(g["util_gpu_mean"] > 0.8 for g in data["gpus"])
    series = data["timeline"]["series"]
    assert len(series) == 4 and data["timeline"]["minutes"] == 16
    values = next(iter(series.values()))
    assert len(values) == 16 and max(v for v in values if v is not None) > 0.8


def test_timeline_downsampled_to_columns(classified) -> None:
    url, built = classified
    jid = job_of(built, "noamp-h200-1")
    late = corpus.T0.replace(hour=10).isoformat()  # 2 h later: 121 minutes, mostly without data
    data = json.loads(run("--db", url, "job", jid, "--at", late, "--format", "json").output)
    values = next(iter(data["timeline"]["series"].values()))
    assert len(values) == 60 and values[-1] is None and values[0] is not None
    text = run("--db", url, "job", jid, "--at", late).output
    bar = next(ln for ln in text.splitlines() if ln.strip().startswith("c")).split("|")[1]
    assert len(bar) == 60 and bar.endswith(" ") and bar[0] != " "


def test_png_plot(classified, tmp_path) -> None:
    url, built = classified
    png = tmp_path / "job.png"
    jid = job_of(built, "input-cpu-saturated")
    result = CliRunner().invoke(cli, ["--db", url, "job", jid, "--at", AT, "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert f"wrote {png} (4 GPU(s))" in result.output
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1000, 420)


def test_the_plot_has_axes_a_title_and_a_legend() -> None:
    """What --plot draws: the job and its verdict in the title, UTC times and percent on the
    axes with distinct tick labels, one legend entry per GPU, a gap where a GPU sent nothing."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    start = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)
    series = {"c01n0:0": [0.9] * 30, "c01n0:1": [0.9] * 10 + [None] * 5 + [0.1] * 15}
    figure = utilization_figure("job 9001: GPU utilization — input_bound (whole job)", start, 60.0, series)
    FigureCanvasAgg(figure).draw()  # ticks are chosen when drawn
    (axes,) = figure.axes
    assert axes.get_title(loc="left").startswith("job 9001") and "input_bound" in axes.get_title(loc="left")
    assert axes.get_xlabel() == "time (UTC)" and axes.get_ylabel() == "GPU utilization"
    x_ticks = [t.get_text() for t in axes.get_xticklabels() if t.get_text()]
    y_ticks = [t.get_text() for t in axes.get_yticklabels() if t.get_text()]
    assert len(x_ticks) >= 3 and len(set(x_ticks)) == len(x_ticks) and "08:10" in x_ticks
    assert "100%" in y_ticks and "0%" in y_ticks
    assert [t.get_text() for t in axes.get_legend().get_texts()] == list(series)
    gap = axes.get_lines()[1].get_ydata()
    assert sum(v != v for v in gap) == 5  # NaN: the line breaks
    # a faulted GPU: its note in the legend, a cross where its line ends
    label = list(series)[1]
    marked = utilization_figure("t", start, 60.0, series, faults={label: "XID 79, lost"})
    (axes,) = marked.axes
    assert f"{label} (XID 79, lost)" in [t.get_text() for t in axes.get_legend().get_texts()]
    crosses = [line for line in axes.get_lines() if line.get_marker() == "X"]
    values = series[label]
    last = max(i for i, v in enumerate(values) if v is not None)
    assert len(crosses) == 1 and list(crosses[0].get_ydata()) == [values[last]]


def test_plot_without_matplotlib_is_one_line(classified, tmp_path, monkeypatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name.startswith("matplotlib"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    url, built = classified
    png = tmp_path / "job.png"
    result = CliRunner().invoke(cli, ["--db", url, "job", job_of(built, "input-cpu-saturated"), "--at", AT,
                                      "--plot", str(png)])  # fmt: skip
    assert result.exit_code == 1 and "pip install 'gpuwatch[plot]'" in result.output
    assert "Traceback" not in result.output and not png.exists()


def test_unknown_job_and_spark() -> None:
    assert spark([0.0, 0.5, 1.0, None]) == f"{BLOCKS[0]}{BLOCKS[4]}{BLOCKS[-1]} "


def test_unknown_job(engine, db_url) -> None:
    result = CliRunner().invoke(cli, ["--db", db_url, "job", "424242"])
    assert result.exit_code == 1 and "not known" in result.output


def test_timeline_bucketed_in_the_database_matches_downsample(classified) -> None:
    """The SQL GROUP BY gives what downsampling the per-minute series in Python gives."""
    from gpuwatch.sql.engine import create_engine
    from gpuwatch.views import downsample, job_view

    url, built = classified
    at = corpus.T0.replace(minute=15)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            for name in ("input-cpu-saturated", "healthy-training-h200", "noamp-h200-1"):
                jid = job_of(built, name)
                per_minute = job_view(conn, jid, at, columns=None).timeline
                for columns in (5, 7, 15):
                    bucketed = job_view(conn, jid, at, columns=columns).timeline
                    assert bucketed.keys() == per_minute.keys()
                    for key, values in per_minute.items():
                        expected = downsample(values, columns)
                        got = bucketed[key]
                        assert len(got) == columns == len(expected)
                        assert [v is None for v in got] == [v is None for v in expected]
                        assert any(v is not None for v in got)
                        pairs = zip(got, expected, strict=True)
                        assert all(abs(a - b) < 1e-9 for a, b in pairs if a is not None)
    finally:
        engine.dispose()


def test_png_plot_into_a_missing_folder_is_one_line(classified, tmp_path) -> None:
    url, built = classified
    png = tmp_path / "no" / "such" / "job.png"
    result = CliRunner().invoke(cli, ["--db", url, "job", job_of(built, "input-cpu-saturated"), "--at", AT,
                                      "--plot", str(png)])  # fmt: skip
    assert (result.exit_code == 1 and result.exception is None) or isinstance(result.exception, SystemExit)
    assert f"cannot write --plot {png}" in result.output and "No such file or directory" in result.output


def test_energy_of_the_job_is_its_gpus_power_over_the_run(classified) -> None:
    """The corpus's samples carry power; the job's GPU energy (views/energy.py) is its GPUs'
    mean power x the minutes they reported, in the JSON and in one line of the text."""
    url, built = classified
    jid = job_of(built, "healthy-training-h200")
    data = json.loads(run("--db", url, "job", jid, "--at", AT, "--format", "json").output)
    energy = data["energy"]
    assert energy is not None and 0 <= energy["estimated_share"] <= 1
    # each sample covers 10 s at its mean power
    expected_kwh = sum(g["power_watts_mean"] * g["samples"] * 10 for g in data["gpus"]) / 3.6e6
    assert energy["kwh"] == pytest.approx(expected_kwh, rel=0.02), energy
    assert sum(g["energy_kwh"] for g in data["gpus"]) == pytest.approx(energy["kwh"], abs=1e-3)  # per GPU
    text = run("--db", url, "job", jid, "--at", AT).output
    assert f"GPU energy   {energy['kwh']:.3f} kWh" in text


def test_a_narrow_terminal_leaves_gpu_columns_out_instead_of_cutting_cells(classified) -> None:
    url, built = classified
    jid = job_of(built, "idle-all-4-h200")
    out = CliRunner().invoke(cli, ["--db", url, "job", jid, "--at", AT], env={"COLUMNS": "60"}).output
    table = out[out.index("┏") : out.index("Verdicts")]
    assert "…" not in table  # no cell cut short
    assert "mean util" in table and "60-column terminal: energy kWh; tensor" in table
    long = [line for line in out.splitlines() if len(line) > 60 and not line.startswith(("60-column", "  c"))]
    assert not long, long
