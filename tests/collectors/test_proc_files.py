from __future__ import annotations

import pytest
from hosttrees import paths_at

from gpuwatch.collectors.cpu import CpuCollector, make_cpu
from gpuwatch.collectors.disk import DiskCollector, make_disk
from gpuwatch.collectors.memory import MemoryCollector, make_memory
from gpuwatch.collectors.nic import NicCollector, make_nic
from gpuwatch.config import Settings


@pytest.mark.parametrize(
    ("make", "collector"),
    [
        (make_cpu, CpuCollector),
        (make_disk, DiskCollector),
        (make_memory, MemoryCollector),
        (make_nic, NicCollector),
    ],
)
def test_a_proc_file_collector_is_made_where_its_file_is(make, collector, host, tmp_path):
    assert isinstance(make(Settings(host_paths=host("typical").paths)), collector)
    assert make(Settings(host_paths=paths_at(tmp_path / "nowhere"))) is None
