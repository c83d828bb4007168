"""Hostlist expansion/compression, against the forms Slurm prints."""

from __future__ import annotations

import pytest

from gpuwatch.slurm.errors import SlurmParseError
from gpuwatch.slurm.hostlist import compress, expand, expand_or_empty


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("vm", ["vm"]),
        ("node[001-003,007],gpu-a[1-2]", ["node001", "node002", "node003", "node007", "gpu-a1", "gpu-a2"]),
        ("gpu[01-02]", ["gpu01", "gpu02"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("n[08-11]", ["n08", "n09", "n10", "n11"]),
        ("a,b,c", ["a", "b", "c"]),
        ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
        ("node[1-2]-ib", ["node1-ib", "node2-ib"]),
        ("node[5]", ["node5"]),
        ("node[3,1]", ["node3", "node1"]),
        (" node1 , node2 ", ["node1", "node2"]),
        ("gpu-[005-006]", ["gpu-005", "gpu-006"]),
        ("10.0.0.[1-2]", ["10.0.0.1", "10.0.0.2"]),
    ],
)
def test_expand(text: str, hosts: list[str]) -> None:
    assert expand(text) == hosts


@pytest.mark.parametrize("empty", [None, "", "(null)", "None assigned", "  "])
def test_expand_empty_words(empty: str | None) -> None:
    assert expand(empty) == []


@pytest.mark.parametrize(
    "bad", ["node[1-2", "node1-2]", "node[a-b]", "node[3-1]", "node[1-2-3]", "n[1-99999999]"]
)
def test_expand_malformed_raises(bad: str) -> None:
    with pytest.raises(SlurmParseError):
        expand(bad)
    assert expand_or_empty(bad) == []


@pytest.mark.parametrize(
    ("hosts", "text"),
    [
        (["node001", "node002", "node003", "node007", "gpu-a1", "gpu-a2"], "gpu-a[1-2],node[001-003,007]"),
        (["vm"], "vm"),
        (["n9", "n10", "n1"], "n[1,9-10]"),
        (["n099", "n100"], "n[099-100]"),
        (["node2-ib", "node1-ib"], "node[1-2]-ib"),
        (["b", "a", "a"], "a,b"),
        ([], ""),
        (["n01", "n1"], "n01,n1"),
    ],
)
def test_compress(hosts: list[str], text: str) -> None:
    assert compress(hosts) == text


@pytest.mark.parametrize(
    "text", ["node[001-003,007],gpu-a[1-2]", "r[1-2]n[01-02]", "a[1-3],b[10-12],c", "x[0009-0011]"]
)
def test_round_trip(text: str) -> None:
    hosts = expand(text)
    assert sorted(expand(compress(hosts))) == sorted(set(hosts))
