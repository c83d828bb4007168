"""The one place the workload imports torch (an optional extra: ``gpuwatch[workload]``)."""

from __future__ import annotations

import warnings
from types import ModuleType

#: torch's CPU wheels warn at import when NumPy is missing; the workload never hands tensors
#: to NumPy, so that one message (and only it) is silenced here.
_NUMPY_MISSING = r"Failed to initialize NumPy"


class TorchMissing(RuntimeError):
    """torch is not installed: the workload needs ``pip install 'gpuwatch[workload]'``."""


def import_torch() -> ModuleType:
    """``torch``, imported once; :class:`TorchMissing` with the install hint when absent."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NUMPY_MISSING, category=UserWarning)
        try:
            import torch
            import torch.utils.data
        except ImportError as exc:
            raise TorchMissing(
                f"the reference workload needs torch: pip install 'gpuwatch[workload]' ({exc})"
            ) from exc
    return torch
