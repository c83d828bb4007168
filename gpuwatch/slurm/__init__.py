"""Slurm correlation: parse what Slurm says about jobs, and which job holds which GPU.

Pure parsers (``squeue``, ``scontrol``, ``sacct``, ``hostlist``, ``gres``) turn the text of
Slurm's commands into :class:`~gpuwatch.slurm.model.SlurmJob` records; ``commands`` runs those
commands (locally or through a prefix such as ``ssh login1``); ``attribution`` is the agent
side (prolog GPU map files, ``/proc/<pid>/cgroup`` and ``/proc/<pid>/environ``).

Formats covered: Slurm 22.05 (OpenAPI v0.0.38 JSON, recorded in tests/fixtures/slurm/22.05)
and the data_parser JSON of Slurm 23.11+/24.x (v0.0.40+, tests/fixtures/slurm/24.05).
"""

from gpuwatch.slurm.errors import SlurmCommandError, SlurmError, SlurmParseError
from gpuwatch.slurm.model import SlurmJob

__all__ = ["SlurmCommandError", "SlurmError", "SlurmJob", "SlurmParseError"]
