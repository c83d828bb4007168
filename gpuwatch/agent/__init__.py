"""The node agent: sample loop, on-disk spool and HTTP push to the daemon.

``Agent`` (runner.py) samples and spools; ``Spool`` (spool.py) is the crash-safe queue and
documents what each failure loses; ``Pusher``/``Backoff`` (push.py) talk to the daemon.
The collector list comes from ``gpuwatch.collectors`` and is passed in.
"""

from gpuwatch.agent.push import Backoff, Outcome, Pusher, PushResult, classify, parse_retry_after
from gpuwatch.agent.runner import Agent, SleepFn, event_sleep
from gpuwatch.agent.spool import Spool, SpooledBatch, SpoolLockedError

__all__ = [
    "Agent",
    "Backoff",
    "Outcome",
    "PushResult",
    "Pusher",
    "SleepFn",
    "Spool",
    "SpoolLockedError",
    "SpooledBatch",
    "classify",
    "event_sleep",
    "parse_retry_after",
]
