"""GRES detail and TRES strings."""

from __future__ import annotations

import pytest

from gpuwatch.slurm.gres import (
    GresAlloc,
    gpu_count,
    gpu_indices,
    gpus_from_tres,
    memory_bytes,
    parse_gres_entry,
    parse_index_list,
    parse_tres,
)

G = 1 << 30
M = 1 << 20


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("gpu:fake:2(IDX:0-1)", [GresAlloc("gpu", "fake", 2, (0, 1))]),
        ("gpu:a100:4(IDX:0,2-3)", [GresAlloc("gpu", "a100", 4, (0, 2, 3))]),
        ("gpu(IDX:1)", [GresAlloc("gpu", None, 1, (1,))]),
        ("gpu:2(IDX:0-1)", [GresAlloc("gpu", None, 2, (0, 1))]),
        ("gpu:a100:0(IDX:N/A)", [GresAlloc("gpu", "a100", 0, None)]),
        ("gpu:a100:2(CNT:2)", [GresAlloc("gpu", "a100", 2, None)]),
        ("gpu(CNT:3)", [GresAlloc("gpu", None, 3, None)]),
        (
            "gpu:a100:2(IDX:0-1),nic:1(IDX:0)",
            [GresAlloc("gpu", "a100", 2, (0, 1)), GresAlloc("nic", None, 1, (0,))],
        ),
        ("gpu:tesla:1(S:0)(IDX:3)", [GresAlloc("gpu", "tesla", 1, (3,))]),
        ("", []),
    ],
)
def test_parse_gres_entry(entry: str, expected: list[GresAlloc]) -> None:
    assert parse_gres_entry(entry) == expected


def test_gpu_indices_and_count() -> None:
    assert gpu_indices("gpu:a100:1(IDX:3),gpu:v100:1(IDX:0)") == (0, 3)
    assert gpu_indices("gpu:a100:2(IDX:0-1),nic:1(IDX:5)") == (0, 1)
    assert gpu_indices("gpu:a100:2(CNT:2)") == ()
    assert gpu_count("gpu:a100:2(CNT:2)") == 2
    assert gpu_count("gpu:fake:2(IDX:0-1),mps:100(IDX:0)") == 2
    assert gpu_count("") == 0


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("0-1", (0, 1)), ("0,2-3", (0, 2, 3)), ("N/A", None), ("", None), ("x", None), ("7", (7,))],
)
def test_parse_index_list(spec: str, expected: tuple[int, ...] | None) -> None:
    assert parse_index_list(spec) == expected


def test_parse_tres_recorded_strings() -> None:
    # squeue tres_alloc_str and sacct AllocTRES of the recorded gpu:2 job (22.05)
    assert parse_tres("cpu=2,mem=1G,node=1,billing=2,gres/gpu=2") == {
        "cpu": 2, "mem": G, "node": 1, "billing": 2, "gres/gpu": 2,
    }  # fmt: skip
    assert parse_tres("billing=1,cpu=1,gres/gpu=1,mem=256M,node=1")["mem"] == 256 * M


@pytest.mark.parametrize(
    ("mem", "expected"),
    [
        ("1K", 1024),
        ("1M", M),
        ("1G", G),
        ("2T", 2 << 40),
        ("1P", 1 << 50),
        ("1.50G", int(1.5 * G)),
        ("1024", G),
    ],
)
def test_tres_memory_units(mem: str, expected: int) -> None:
    assert parse_tres(f"mem={mem}") == {"mem": expected}


def test_parse_tres_odd_input() -> None:
    assert parse_tres(None) == {}
    assert parse_tres("") == {}
    assert parse_tres("cpu=4,garbage,mem=lots,gres/gpu:a100=2,billing=1.5") == {
        "cpu": 4, "gres/gpu:a100": 2, "billing": 1,
    }  # fmt: skip
    assert parse_tres("fs/disk=10G") == {"fs/disk": 10 * G}


def test_memory_bytes() -> None:
    assert memory_bytes("512M") == 512 * M
    assert memory_bytes(256) == 256 * M
    assert memory_bytes("4GiB") == 4 * G
    assert memory_bytes("nope") is None
    assert memory_bytes(None) is None


def test_gpus_from_tres() -> None:
    assert gpus_from_tres({"gres/gpu": 8, "gres/gpu:a100": 8}) == 8
    assert gpus_from_tres({"gres/gpu:a100": 2, "gres/gpu:v100": 1}) == 3
    assert gpus_from_tres({"cpu": 1}) is None
