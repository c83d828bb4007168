"""The read model: each question the product answers, answered by one function.

The CLI, the web view, the demo and the alert rules call these and only render what they
return; none of them queries tables. Two surfaces therefore cannot disagree about a job.

* :func:`jobs_query` — which Slurm jobs ran, on which GPUs, how busy those were;
* :func:`low_util_jobs` — which jobs waste their GPUs, why, and how many GPU-hours
  (:func:`low_util_page`: a page of it and the count of all; :func:`low_util_json`: every
  row as JSON text, made by PostgreSQL);
* :func:`job_view` — what one job did: per-GPU means, a timeline, charts, its verdicts, what
  it used of what it asked for (``usage.py``) and what to request next time (``advice.py``);
* :func:`summary_rows` — that job's seff-style summary as the rows every surface prints;
* :func:`latest_evaluations` — every verdict of each job's newest evaluation;
* :func:`cluster_overview` — every GPU's last hour, and the GPUs busy, idle and wasted now;
* :func:`waste_in_period` — the GPU-hours each job wasted in a period, per cause;
* :func:`idle_jobs` — which running jobs have held only idle GPUs, and since when;
* :func:`node_summaries` — which nodes report, with their GPUs and sample counts;
* :func:`node_view` — one node: its GPUs' last hours, their faults, the jobs that held them;
* :func:`usage_report` — GPU-hours held and wasted per user, account or partition;
* :func:`evidence_sentences` — a verdict's evidence as sentences, for every surface.

Each name is imported from its module when it is first asked for (:func:`__getattr__`), so a
command pays for the questions it asks: ``gpuwatch jobs --low-util`` loads the listing's
modules, not the job page's series and charts, the overview or the report.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as their modules define them, for type checkers and readers
    from gpuwatch.views.evaluations import WINDOW_NAMES, Evaluation, VerdictRow, latest_evaluations
    from gpuwatch.views.evidence import evidence_sentences
    from gpuwatch.views.idle import IdleJob, idle_jobs
    from gpuwatch.views.job import GPU_METRICS, GpuSummary, JobCharts, JobInfo, JobView, downsample, job_view
    from gpuwatch.views.jobs import JobFilters, JobSummary, jobs_query
    from gpuwatch.views.lowutil import (
        SORTS,
        LowUtilFilters,
        LowUtilJob,
        LowUtilPage,
        low_util_jobs,
        low_util_page,
    )
    from gpuwatch.views.lowutil_json import low_util_json
    from gpuwatch.views.node import NodeView, node_view
    from gpuwatch.views.nodes import NodeSummary, node_summaries
    from gpuwatch.views.overview import Overview, cluster_overview
    from gpuwatch.views.report import GroupBy, ReportRow, report_period, usage_report
    from gpuwatch.views.summary_text import summary_rows
    from gpuwatch.views.waste import JobWaste, waste_in_period

#: the module (under ``gpuwatch.views``) that defines each public name
HOMES: dict[str, str] = {
    **dict.fromkeys(("WINDOW_NAMES", "Evaluation", "VerdictRow", "latest_evaluations"), "evaluations"),
    "evidence_sentences": "evidence",
    **dict.fromkeys(("IdleJob", "idle_jobs"), "idle"),
    **dict.fromkeys(
        ("GPU_METRICS", "GpuSummary", "JobCharts", "JobInfo", "JobView", "downsample", "job_view"), "job"
    ),
    **dict.fromkeys(("JobFilters", "JobSummary", "jobs_query"), "jobs"),
    **dict.fromkeys(
        ("SORTS", "LowUtilFilters", "LowUtilJob", "LowUtilPage", "low_util_jobs", "low_util_page"), "lowutil"
    ),
    "low_util_json": "lowutil_json",
    **dict.fromkeys(("NodeView", "node_view"), "node"),
    **dict.fromkeys(("NodeSummary", "node_summaries"), "nodes"),
    **dict.fromkeys(("Overview", "cluster_overview"), "overview"),
    **dict.fromkeys(("GroupBy", "ReportRow", "report_period", "usage_report"), "report"),
    "summary_rows": "summary_text",
    **dict.fromkeys(("JobWaste", "waste_in_period"), "waste"),
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module (:data:`HOMES`) the first time it is asked for
    and kept here after; a submodule (``from gpuwatch.views import period``) is found by the
    import system itself once this says the name is no attribute."""
    home = HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "GPU_METRICS",
    "SORTS",
    "WINDOW_NAMES",
    "Evaluation",
    "GpuSummary",
    "GroupBy",
    "IdleJob",
    "JobCharts",
    "JobFilters",
    "JobInfo",
    "JobSummary",
    "JobView",
    "JobWaste",
    "LowUtilFilters",
    "LowUtilJob",
    "LowUtilPage",
    "NodeSummary",
    "NodeView",
    "Overview",
    "ReportRow",
    "VerdictRow",
    "cluster_overview",
    "downsample",
    "evidence_sentences",
    "idle_jobs",
    "job_view",
    "jobs_query",
    "latest_evaluations",
    "low_util_jobs",
    "low_util_json",
    "low_util_page",
    "node_summaries",
    "node_view",
    "report_period",
    "summary_rows",
    "usage_report",
    "waste_in_period",
]
