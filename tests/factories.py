"""Hand-made wire samples for storage and API tests (the agent makes real ones)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch import wire
from gpuwatch.clock import utcnow
from gpuwatch.sql.nodes import hash_token
from gpuwatch.sql.schema import nodes

T0 = datetime(2026, 12, 1, 23, 59, 50, tzinfo=timezone.utc)  # crosses a UTC day boundary


#: the GpuSample fields of a card's memory health and PCIe link (docs/gpu.md, "Memory health")
MEMORY_HEALTH = (
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "row_remap_pending",
    "row_remap_failed",
    "retired_pages_sbe",
    "retired_pages_dbe",
    "retired_pages_pending",
    "pcie_replay_errors",
)


def gpu_sample(ts: datetime, index: int = 0, util: float = 0.5, **kw) -> wire.GpuSample:
    fields = dict(
        ts=ts,
        gpu_index=index,
        uuid=f"GPU-{index:08d}-aaaa-bbbb-cccc-000000000000",
        name="NVIDIA H200",
        pci_bus_id=f"00000000:{index + 0x18:02X}:00.0",
        interval_s=10.0,
        util_gpu_ratio=util,
        util_memory_ratio=util / 2,
        memory_used_bytes=40 * 2**30,
        memory_total_bytes=141 * 2**30,
        power_watts=350.5,
        power_limit_watts=700.0,
        energy_joules=123456.0,
        sm_active_ratio=util * 0.9,
        tensor_active_ratio=0.0,
        throttle_reasons=["sw_power_cap"],
        processes=[wire.GpuProcess(pid=4242 + index, used_memory_bytes=39 * 2**30, job_id="123")],
        simulated=True,
    )
    fields.update(kw)
    return wire.GpuSample(**fields)


def host_samples(ts: datetime) -> list:
    return [
        wire.CpuSample(
            ts=ts,
            cores=8,
            busy_ratio=0.5,
            user_ratio=0.4,
            system_ratio=0.1,
            iowait_ratio=0.0,
            per_core_busy_ratio=[0.5] * 8,
            load1=4.0,
        ),
        wire.MemorySample(ts=ts, total_bytes=2**36, available_bytes=2**35, used_bytes=2**35),
        wire.NicSample(
            ts=ts,
            device="eth0",
            rx_bytes_per_s=1e6,
            tx_bytes_per_s=2e6,
            rx_packets_per_s=100,
            tx_packets_per_s=200,
        ),
        wire.InfinibandSample(ts=ts, device="mlx5_0", port=1, rx_bytes_per_s=1e9, tx_bytes_per_s=1e9),
        wire.DiskSample(
            ts=ts,
            device="nvme0n1",
            read_bytes_per_s=1e7,
            write_bytes_per_s=0,
            reads_per_s=10,
            writes_per_s=0,
            busy_ratio=0.1,
        ),
        wire.JobSample(
            ts=ts,
            job_id="123",
            cpu_used_cores=3.5,
            cpu_allocated_cores=4,
            memory_used_bytes=2**30,
            cgroup_version=2,
        ),
        wire.AttributionSample(ts=ts, gpu_index=0, job_id="123", user="alice", uid=1000, source="prolog"),
        wire.AgentSample(ts=ts, spool_batches=0, collector_seconds={"cpu": 0.001}),
    ]


def batch(
    node: str = "node001", cycles: int = 2, gpus: int = 2, start: datetime = T0, seq: int = 0
) -> wire.Batch:
    samples: list = []
    for c in range(cycles):
        ts = start + timedelta(seconds=10 * c)
        samples.extend(gpu_sample(ts, i, util=0.1 * (i + 1)) for i in range(gpus))
        samples.extend(host_samples(ts))
    return wire.Batch(node=node, agent_version="test", seq=seq, samples=samples)


def register_nodes(engine: sa.Engine, tokens: dict[str, str]) -> dict[str, str]:
    """Register each node (name -> token) in one statement, for loads of thousands of agents
    (``create_token`` is a transaction each); returns ``tokens``."""
    now = utcnow()
    with engine.begin() as conn:
        conn.execute(
            nodes.insert(),
            [
                {"name": name, "token_sha256": hash_token(token), "created_at": now, "token_created_at": now}
                for name, token in tokens.items()
            ],
        )
    return tokens
