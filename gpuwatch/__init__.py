"""gpuwatch: find the GPU jobs on a Slurm cluster that waste their GPUs, and say why."""

__version__ = "0.1.0"
