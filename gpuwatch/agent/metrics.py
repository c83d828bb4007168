"""Prometheus ``/metrics`` on the agent, from the batch the agent just built.

:class:`AgentMetrics` is a prometheus-client custom collector: the sample loop hands it every
batch (:meth:`AgentMetrics.update`) and a scrape turns the latest one into metric families
(:meth:`AgentMetrics.collect`). A scrape never samples: it costs one pass over one batch, and
scraping faster than ``agent.interval_s`` returns the same values. Names, types and help text
come from :mod:`gpuwatch.catalog` (its docstring says why the names are ``gpuwatch_*`` with
dcgm-exporter's labels); a value the wire has as None is an absent series, never 0.

Slurm jobs are not a label on GPU series, which would start a new series per job on every
metric: ``gpuwatch_gpu_job_info{gpu, uuid, job_id, user, hostname} 1`` says which job holds
which GPU (from the batch's attribution samples, and from ``GpuProcess.job_id``), and a query
joins it: ``gpuwatch_gpu_utilization_ratio * on (hostname, gpu) group_left(job_id)
gpuwatch_gpu_job_info``.

:func:`start_metrics_server` serves it on its own registry (no default process/platform
collectors) with prometheus-client's threaded HTTP server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpuwatch import catalog
from gpuwatch.collectors.gpu_backend import CLOCKS_EVENT_REASONS, GpuBackend, MigDevice
from gpuwatch.wire import AgentSample, AttributionSample, Batch, GpuSample

log = logging.getLogger(__name__)

#: catalog label -> the sample attribute it is read from, for the generic host/job series
_LABEL_ATTRS = {"device": "device", "port": "port", "job_id": "job_id"}
#: GPU series that need more than "the field's number"
_SPECIAL = frozenset(
    {
        "gpuwatch_gpu_up",
        "gpuwatch_gpu_clocks_event_active",
        "gpuwatch_gpu_xid_errors_total",
        "gpuwatch_gpu_xid_last_code",
        "gpuwatch_gpu_processes",
        "gpuwatch_gpu_job_info",
        "gpuwatch_agent_collector_duration_seconds",
        "gpuwatch_agent_collector_success",
    }
)
#: Agent attribute -> exported counter
_AGENT_COUNTERS = (
    ("cycles", "gpuwatch_agent_cycles_total"),
    ("cycle_errors", "gpuwatch_agent_cycle_errors_total"),
    ("skipped_ticks", "gpuwatch_agent_skipped_ticks_total"),
    ("sent_batches", "gpuwatch_agent_sent_batches_total"),
    ("rejected_batches", "gpuwatch_agent_rejected_batches_total"),
    ("retried_sends", "gpuwatch_agent_retried_sends_total"),
    ("bundles_sent", "gpuwatch_agent_bundles_sent_total"),
    ("merged_sends", "gpuwatch_agent_merged_sends_total"),
)
_KNOWN_REASONS = tuple(name for _, name in CLOCKS_EVENT_REASONS)


class _Families:
    """Metric families created on first use, with the catalog's type, help and label names."""

    def __init__(self) -> None:
        self._entries = catalog.by_prometheus_name()
        self._families: dict[str, Metric] = {}

    def add(self, name: str, labels: dict[str, str], value: float) -> None:
        family = self._families.get(name)
        entry = self._entries[name]  # KeyError: a series the catalog does not have
        if family is None:
            help_text = catalog.help_text(name)
            label_names = list(labels)
            if entry.type == "counter":
                family = CounterMetricFamily(name, help_text, labels=label_names)
            else:
                family = GaugeMetricFamily(name, help_text, labels=label_names)
            self._families[name] = family
        family.add_metric(list(labels.values()), float(value))  # type: ignore[attr-defined]

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._families.values())


class AgentMetrics:
    """The agent's metrics over its latest batch; register on a ``CollectorRegistry``.

    ``agent`` (an :class:`~gpuwatch.agent.runner.Agent`) adds its cycle/send counters;
    ``gpu_backend`` adds the MIG devices it listed at its last sample (read, not re-sampled).
    """

    def __init__(self, *, agent: Any = None, gpu_backend: GpuBackend | None = None) -> None:
        self.agent = agent
        self.gpu_backend = gpu_backend
        self._lock = threading.Lock()
        self._batch: Batch | None = None
        self._mig: list[MigDevice] = []
        #: (gpu label values, xid) -> intervals it was seen in, since start
        self._xid_totals: dict[tuple[tuple[str, ...], int], int] = {}
        #: gpu label values -> last XID (0: watched, none yet)
        self._xid_last: dict[tuple[str, ...], int] = {}

    @classmethod
    def for_collectors(cls, collectors: Sequence[Any], agent: Any = None) -> AgentMetrics:
        """Metrics for an agent running ``collectors`` (finds the GPU collector's backend)."""
        backend = next((c.backend for c in collectors if getattr(c, "name", "") == "gpu"), None)
        return cls(agent=agent, gpu_backend=backend)

    def describe(self) -> list[Metric]:
        """Nothing up front: the series depend on the batch (and registering must not collect)."""
        return []

    # -- input ----------------------------------------------------------------------------

    def update(self, batch: Batch) -> None:
        """Take the batch the agent just built; XID totals accumulate here, once per batch."""
        mig = self.gpu_backend.mig_devices() if self.gpu_backend is not None else []
        with self._lock:
            self._batch = batch
            self._mig = mig
            for sample in batch.samples:
                if isinstance(sample, GpuSample) and sample.xid_errors is not None:
                    key = _gpu_labels(sample, batch.node)
                    self._xid_last.setdefault(key, 0)
                    for code in sample.xid_errors:
                        self._xid_totals[(key, code)] = self._xid_totals.get((key, code), 0) + 1
                        self._xid_last[key] = code

    # -- output ---------------------------------------------------------------------------

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            batch = self._batch
            mig = list(self._mig)
            xid_totals = dict(self._xid_totals)
            xid_last = dict(self._xid_last)
        out = _Families()
        if batch is not None:
            self._collect_batch(out, batch)
            host = {"hostname": batch.node}
            for (key, code), count in sorted(xid_totals.items()):
                out.add("gpuwatch_gpu_xid_errors_total", {**_labels(key), "xid": str(code)}, count)
            for key, code in sorted(xid_last.items()):
                out.add("gpuwatch_gpu_xid_last_code", _labels(key), code)
            gpus = {
                s.gpu_index: _gpu_labels(s, batch.node) for s in batch.samples if isinstance(s, GpuSample)
            }
            self._collect_mig(out, batch.node, mig, gpus)
            out.add("gpuwatch_agent_last_batch_timestamp_seconds", host, batch.created_at.timestamp())
            out.add("gpuwatch_agent_batch_samples", host, len(batch.samples))
            if self.agent is not None:
                for attribute, name in _AGENT_COUNTERS:
                    out.add(name, host, getattr(self.agent, attribute))
        return list(out)

    def _collect_batch(self, out: _Families, batch: Batch) -> None:
        node = batch.node
        generic = [e for e in catalog.CATALOG if e.field and e.prometheus and e.prometheus not in _SPECIAL]
        by_kind: dict[str, list[catalog.Entry]] = {}
        for entry in generic:
            by_kind.setdefault(entry.kind, []).append(entry)
        jobs: dict[tuple[str, str], dict[str, str]] = {}
        gpu_uuids: dict[int, str | None] = {}
        for sample in batch.samples:
            if isinstance(sample, GpuSample):
                gpu_uuids[sample.gpu_index] = sample.uuid
        for sample in batch.samples:
            kind = sample.kind
            if isinstance(sample, GpuSample):
                labels = _labels(_gpu_labels(sample, node))
                out.add("gpuwatch_gpu_up", labels, 1 if sample.state == "ok" else 0)
                for entry in by_kind.get("gpu", []):
                    value = getattr(sample, entry.field or "")
                    if value is not None:
                        out.add(entry.prometheus or "", labels, float(value))
                if sample.throttle_reasons is not None:
                    active = set(sample.throttle_reasons)
                    for reason in (*_KNOWN_REASONS, *sorted(active - set(_KNOWN_REASONS))):
                        out.add(
                            "gpuwatch_gpu_clocks_event_active", {**labels, "reason": reason}, reason in active
                        )
                if sample.processes is not None:
                    out.add("gpuwatch_gpu_processes", labels, len(sample.processes))
                    for process in sample.processes:
                        if process.job_id is not None:
                            jobs.setdefault(
                                (str(sample.gpu_index), process.job_id),
                                _job_labels(sample.gpu_index, sample.uuid, process.job_id, None, node),
                            )
            elif isinstance(sample, AttributionSample):
                uuid = sample.gpu_uuid or gpu_uuids.get(sample.gpu_index)
                # the attribution knows the user; it wins over a process-derived entry
                jobs[(str(sample.gpu_index), sample.job_id)] = _job_labels(
                    sample.gpu_index, uuid, sample.job_id, sample.user, node
                )
            elif isinstance(sample, AgentSample):
                self._collect_agent(out, sample, node)
                for entry in by_kind.get("agent", []):
                    out.add(
                        entry.prometheus or "", {"hostname": node}, float(getattr(sample, entry.field or ""))
                    )
            else:
                for entry in by_kind.get(kind, []):
                    value = getattr(sample, entry.field or "", None)
                    if value is None:
                        continue
                    labels = {"hostname": node}
                    for label in entry.labels[1:]:
                        labels[label] = str(getattr(sample, _LABEL_ATTRS[label]))
                    out.add(entry.prometheus or "", labels, float(value))
        for key in sorted(jobs):
            out.add("gpuwatch_gpu_job_info", jobs[key], 1)

    @staticmethod
    def _collect_agent(out: _Families, sample: AgentSample, node: str) -> None:
        errors = sample.collector_errors or {}
        for name, seconds in sorted((sample.collector_seconds or {}).items()):
            labels = {"hostname": node, "collector": name}
            out.add("gpuwatch_agent_collector_duration_seconds", labels, seconds)
            out.add("gpuwatch_agent_collector_success", labels, 0 if name in errors else 1)

    @staticmethod
    def _collect_mig(
        out: _Families, node: str, mig: list[MigDevice], gpus: dict[int, tuple[str, ...]]
    ) -> None:
        per_gpu: dict[int, int] = {}
        parents: dict[int, str | None] = {}
        for device in mig:
            per_gpu[device.gpu_index] = per_gpu.get(device.gpu_index, 0) + 1
            parents[device.gpu_index] = device.parent_uuid
            labels = {
                "gpu": str(device.gpu_index),
                "uuid": device.parent_uuid or "",
                "hostname": node,
                "mig_index": str(device.mig_index),
                "mig_uuid": device.uuid or "",
                "gpu_i_id": "" if device.gpu_instance_id is None else str(device.gpu_instance_id),
                "gpu_ci_id": "" if device.compute_instance_id is None else str(device.compute_instance_id),
            }
            for field, name in (
                ("memory_used_bytes", "gpuwatch_gpu_mig_memory_used_bytes"),
                ("memory_total_bytes", "gpuwatch_gpu_mig_memory_total_bytes"),
                ("multiprocessor_count", "gpuwatch_gpu_mig_multiprocessors"),
            ):
                value = getattr(device, field)
                if value is not None:
                    out.add(name, labels, value)
        for index, count in sorted(per_gpu.items()):
            values = gpus.get(index) or (str(index), parents[index] or "", "", "", node)
            out.add("gpuwatch_gpu_mig_devices", _labels(values), count)


def _gpu_labels(sample: GpuSample, node: str) -> tuple[str, ...]:
    """Values of :data:`catalog.GPU_LABELS`, in order."""
    return (str(sample.gpu_index), sample.uuid or "", sample.pci_bus_id or "", sample.name or "", node)


def _labels(values: tuple[str, ...]) -> dict[str, str]:
    return dict(zip(catalog.GPU_LABELS, values, strict=True))


def _job_labels(index: int, uuid: str | None, job_id: str, user: str | None, node: str) -> dict[str, str]:
    return {"gpu": str(index), "uuid": uuid or "", "job_id": job_id, "user": user or "", "hostname": node}


@dataclass
class MetricsServer:
    """A running ``/metrics`` server; :meth:`close` stops its thread."""

    host: str
    port: int
    registry: CollectorRegistry
    _server: Any
    _thread: threading.Thread

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``:port`` (all interfaces) -> (host, port)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"metrics listen address {listen!r} is not host:port")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def start_metrics_server(listen: str, collector: AgentMetrics) -> MetricsServer:
    """Serve ``collector`` at ``http://<listen>/metrics`` on a fresh registry (port 0: any free)."""
    host, port = parse_listen(listen)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    server, thread = start_http_server(port, addr=host, registry=registry)
    bound = server.server_address[1]
    log.info("Prometheus metrics on http://%s:%d/metrics", host, bound)
    return MetricsServer(host, bound, registry, server, thread)
