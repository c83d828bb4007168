"""The typed configuration: :class:`Settings` is assembled in ``settings.py`` from one
module per section that is not the agent's or the daemon's own (``alerts``, ``web``,
``thresholds``); every importer uses the names handed on here."""

from gpuwatch.config.settings import (
    DEFAULT_CONFIG_PATH,
    DEFAULT_PORT,
    AgentConfig,
    ClassifyConfig,
    ConfigError,
    DaemonConfig,
    DatabaseConfig,
    GpuBackendKind,
    GpuConfig,
    HostPaths,
    RetentionConfig,
    Settings,
    SlurmConfig,
    load_settings,
)

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_PORT",
    "AgentConfig",
    "ClassifyConfig",
    "ConfigError",
    "DaemonConfig",
    "DatabaseConfig",
    "GpuBackendKind",
    "GpuConfig",
    "HostPaths",
    "RetentionConfig",
    "Settings",
    "SlurmConfig",
    "load_settings",
]
