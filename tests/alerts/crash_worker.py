"""A worker process that kills itself with SIGKILL at one phase of a send (tests only).

``python -m tests.alerts.crash_worker DB_URL CONFIG_JSON PHASE``: PHASE is ``claimed`` (after
the claim is committed, before anything is sent), ``handoff`` (handoff committed, message not
yet given to the server) or ``sent`` (the server accepted it; the row is not marked yet).
"""

from __future__ import annotations

import os
import signal
import sys

from gpuwatch.alerts.worker import Worker
from gpuwatch.config.alerts import AlertsConfig
from gpuwatch.sql.engine import create_engine


def main() -> None:
    url, config_json, phase = sys.argv[1:4]
    cfg = AlertsConfig.model_validate_json(config_json)
    engine = create_engine(url)

    def hook(at: str, _row: object) -> None:
        if at == phase:
            os.kill(os.getpid(), signal.SIGKILL)

    Worker(engine, cfg, hook=hook, worker_id="doomed").run_once()
    raise SystemExit("the hook never fired")


if __name__ == "__main__":
    main()
