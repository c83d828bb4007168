"""The agent's data sources, one module each, registered by name (see ``base.py``)."""

from __future__ import annotations

import importlib
import logging

from gpuwatch.collectors.base import REGISTRY, Collector, CollectorRun, register, run_collector
from gpuwatch.config import Settings

log = logging.getLogger(__name__)

#: every collector module; importing one registers its factory
COLLECTOR_MODULES = ("cpu", "memory", "nic", "infiniband", "disk", "jobs", "gpu", "attribution")


def load_all() -> dict:
    for module in COLLECTOR_MODULES:
        importlib.import_module(f"gpuwatch.collectors.{module}")
    return REGISTRY


def build_collectors(settings: Settings) -> list[Collector]:
    """The enabled collectors whose source exists on this host, in registry order.

    A name in ``agent.collectors_disabled`` that no collector has is a config error: a
    typo there would otherwise silently keep a collector on.
    """
    registry = load_all()
    unknown = set(settings.agent.collectors_disabled) - set(registry)
    if unknown:
        from gpuwatch.config import ConfigError

        raise ConfigError(
            f"agent.collectors_disabled: unknown collector(s) {sorted(unknown)}; known: {sorted(registry)}"
        )
    built: list[Collector] = []
    for name, factory in registry.items():
        if name in settings.agent.collectors_disabled:
            continue
        collector = factory(settings)
        if collector is None:
            log.info("collector %s: source not present on this host, disabled", name)
            continue
        built.append(collector)
    return built


__all__ = ["REGISTRY", "Collector", "CollectorRun", "build_collectors", "register", "run_collector"]
