"""One typed, validated configuration for agent, daemon and CLI.

Sources, later ones winning: built-in defaults, the TOML file (``--config``, else
``$GPUWATCH_CONFIG``, else ``/etc/gpuwatch/gpuwatch.toml`` if it exists), then environment
variables ``GPUWATCH_<SECTION>__<KEY>`` (e.g. ``GPUWATCH_AGENT__INTERVAL_S=5``) and the
shortcut ``GPUWATCH_DB`` for the database URL. A bad value stops start-up with
:class:`ConfigError`, whose message names the offending key. ``deploy/gpuwatch.toml``
documents every key.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Literal

import platformdirs
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from gpuwatch.config.alerts import AlertsConfig
from gpuwatch.config.section import Section, secret_of
from gpuwatch.config.thresholds import Thresholds
from gpuwatch.config.web import WebConfig

DEFAULT_CONFIG_PATH = Path("/etc/gpuwatch/gpuwatch.toml")
DEFAULT_PORT = 8470


class ConfigError(Exception):
    """The configuration cannot be used; the message names the key and the problem."""


class GpuBackendKind(str, Enum):
    """Where GPU readings come from."""

    AUTO = "auto"  # NVML if it initialises, else amdsmi, else none (said once in the log)
    NVML = "nvml"  # real NVML; failing to initialise is an error
    AMDSMI = "amdsmi"  # AMD GPUs through amdsmi (extra gpuwatch[amd]); failing to start is an error
    SIM = "sim"  # the seeded simulated device model
    NONE = "none"  # GPU collector disabled
    REPLAY = "replay"  # a JSONL recording (gpuwatch agent --record) played back: gpu.replay_file
    WORKLOAD = "workload"  # simulated GPUs driven by a reference workload's activity file


class HostPaths(Section):
    """Roots of every host file a collector reads, so tests point them at fixture trees."""

    proc: Path = Path("/proc")
    sys: Path = Path("/sys")
    run: Path = Path("/run")
    cgroup: Path = Path("/sys/fs/cgroup")

    @property
    def gpu_map_dir(self) -> Path:
        """Where the Slurm prolog writes GPU -> job files (``deploy/slurm/prolog.sh``)."""
        return self.run / "gpuwatch" / "gpu"


class GpuConfig(Section):
    backend: GpuBackendKind = GpuBackendKind.AUTO
    sim_scenario: str = Field("training", description="Scenario name for backend = 'sim'.")
    sim_gpus: int = Field(4, ge=0, le=64)
    sim_seed: int = 0
    sim_model: str = "NVIDIA H200"
    sim_mig: str = Field(
        "",
        description="For backend = 'sim': cards in MIG mode and their instances, e.g. "
        "'gpu1=1g:training+1g:idle+2g' (<slices>g[:scenario] per instance); empty: no MIG.",
    )
    poll_interval_s: float = Field(1.0, gt=0, le=60)
    watch_events: bool = Field(True, description="NVML XID/ECC event thread (nvml backend).")
    replay_file: Path | None = Field(None, description="Recording for backend = 'replay'.")
    replay_loop: bool = Field(False, description="Start the recording again at its end.")
    activity_file: Path | None = Field(
        None,
        description="For backend = 'workload': the activity stream of `gpuwatch workload --activity-file`.",
    )


class AgentConfig(Section):
    node: str = Field(default_factory=lambda: socket.gethostname().split(".")[0])
    daemon_url: str = f"http://127.0.0.1:{DEFAULT_PORT}"
    token: str | None = Field(None, description="Per-node token; prefer token_file.")
    token_file: Path | None = None
    interval_s: float = Field(10.0, gt=0, le=3600)
    spool_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_cache_dir("gpuwatch")) / "spool")
    spool_max_bytes: int = Field(256 * 1024 * 1024, ge=64 * 1024)
    push_timeout_s: float = Field(10.0, gt=0)
    backoff_initial_s: float = Field(1.0, gt=0)
    backoff_max_s: float = Field(300.0, gt=0)
    probe_interval_s: float = Field(
        2.0,
        gt=0,
        le=300,
        description=(
            "While backing off from an outage, the daemon's /healthz is asked this often (0.5-1.5x); "
            "an answer after a failed probe ends the back-off."
        ),
    )
    recovery_jitter_s: float = Field(
        5.0,
        ge=0,
        le=300,
        description=(
            "Once a probe sees the daemon answer again, the agent sends after uniform(0, this): "
            "the cluster's agents come back spread over this window, not in one burst."
        ),
    )
    bundle_max_batches: int = Field(
        64,
        ge=1,
        le=4096,
        description=(
            "A spool backlog goes to the daemon up to this many batches per request (1: one batch "
            "per request)."
        ),
    )
    bundle_max_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="Most bytes in one bundle request.")
    push_every: int = Field(
        18,
        ge=1,
        le=360,
        description=(
            "Send when this many cycles wait, merged into one request (merge_backlog), not after "
            "every cycle. 18 at interval_s = 10: a request per node every 3 minutes, so that one "
            "2-core host holds 10,000 nodes' steady state (docs/scaling.md); the daemon, "
            "dashboards and verdicts see a cycle up to (push_every - 1) * interval_s later, alerts "
            "still within their goal (bench/alert_latency.py). Every cycle is still spooled to disk "
            "at once and the agent's own /metrics is live; held batches get one try at shutdown. "
            "1: a push per cycle (a small cluster that wants its dashboards current)."
        ),
    )
    merge_backlog: bool = Field(
        True,
        description=(
            "Send a backlog of v2 batches (after an outage, or held by push_every) as ONE batch "
            "holding all their samples, within bundle_max_batches and bundle_max_bytes: a third to "
            "a half of the daemon's CPU per cycle of a bundle. A merged batch the daemon refuses "
            "goes again as a bundle."
        ),
    )
    wire_format: Literal[1, 2] = Field(
        2,
        description=(
            "Wire format of the batches this agent writes: 2 (columnar, half of v1's bytes or less, "
            "cheaper for the daemon) or 1. Spooled batches go in the format they were written "
            "in; a daemon without v2 (404) gets v2 batches converted to v1."
        ),
    )
    collectors_disabled: list[str] = Field(default_factory=list)
    metrics_listen: str | None = Field(None, description="host:port for Prometheus /metrics.")

    @field_validator("daemon_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    def resolve_token(self) -> str | None:
        """The token from ``token`` or, if set, the first line of ``token_file``."""
        try:
            return secret_of(self.token, self.token_file)
        except OSError as exc:
            raise ConfigError(f"agent.token_file: cannot read {self.token_file}: {exc}") from exc


class DaemonConfig(Section):
    RETIRED: ClassVar[dict[str, str]] = {
        "copy_min_rows": "daemon.copy_min_rows loaded row tables by COPY; every sample table is now "
        "packed (a row per node and push) and goes by one INSERT"
    }

    listen: str = f"127.0.0.1:{DEFAULT_PORT}"
    max_batch_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    partition_days_ahead: int = Field(3, ge=1, le=60)
    auto_migrate: bool = Field(True, description="Upgrade the schema at start-up.")
    leader_lock_key: int = Field(
        0x67776C64, description="PostgreSQL advisory lock the scheduler's leader holds (one per database)."
    )
    ingest_writers: int = Field(
        2, ge=1, le=16, description="Group-commit writer threads (PostgreSQL; SQLite uses one)."
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description=(
            "HTTP worker processes on the one port (PostgreSQL only): parsing and storing batches "
            "is CPU-bound Python, one process uses one core. Each runs the scheduler too; one leads."
        ),
    )
    max_future_skew_s: float = Field(
        300.0, ge=0, description="Samples stamped further ahead of the daemon clock are refused."
    )
    max_bundle_batches: int = Field(
        256,
        ge=1,
        le=4096,
        description="Most batches in one bundle request (an agent's spool backlog); within max_batch_bytes.",
    )
    max_inflight_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description=(
            "Bytes of request bodies one process holds at once (read, parsed, queued, storing; "
            "~6x that in memory); more gets 503 with Retry-After (a replay storm after an outage). "
            "Counted as bytes arrive, chunked bodies included."
        ),
    )
    body_timeout_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description=(
            "Seconds a request body may take to arrive in full; a slower one gets 408 and its bytes "
            "are released (a slow client cannot hold its share of max_inflight_bytes for long)."
        ),
    )
    http_parser: Literal["auto", "httptools", "h11"] = Field(
        "auto",
        description=(
            "uvicorn's HTTP implementation: auto takes httptools (C, installed with gpuwatch), "
            "h11 is pure Python (slower; for debugging a client)."
        ),
    )
    event_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        "auto", description="auto takes uvloop where installed (Linux), else asyncio's own loop."
    )
    log_each_request: bool = Field(
        False,
        description=(
            "One INFO line per ingest request (debugging a node). Off: one 'ingest summary' line "
            "a minute per process; refusals are logged either way."
        ),
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError("must be host:port, e.g. 127.0.0.1:8470 (port 0: any free port)")
        return value

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])


class SlurmConfig(Section):
    """The daemon's Slurm sync (``gpuwatch/daemon/slurm_sync.py``)."""

    enabled: bool = Field(False, description="Poll Slurm for jobs and their GPUs.")
    command_prefix: list[str] = Field(
        default_factory=list, description="Run Slurm commands through this, e.g. ['ssh', 'login1']."
    )
    sync_interval_s: float = Field(
        30.0, ge=5, description="One squeue call per interval for the whole cluster."
    )
    sacct_interval_s: float = Field(300.0, ge=30, description="Finished jobs from sacct this often.")
    sacct_lookback_s: float = Field(3600.0, ge=60, description="How far back each sacct call looks.")
    command_timeout_s: float = Field(60.0, gt=0)
    cluster: str | None = Field(None, description="sacct -M cluster name, for multi-cluster sites.")
    rest_url: str | None = Field(
        None, description="Use slurmrestd instead of the commands: unix:/path.sock or http(s)://host:6820."
    )
    rest_api_version: str = Field("v0.0.38", description="slurmrestd API (22.05: v0.0.38; 24.05: v0.0.41).")
    rest_user: str | None = Field(None, description="X-SLURM-USER-NAME for rest_auth/jwt.")
    rest_token_file: Path | None = Field(
        None, description="File holding a JWT (scontrol token) for rest_auth/jwt."
    )


class RetentionConfig(Section):
    """How long each kind of data is kept (``gpuwatch/sql/retention.py``)."""

    raw_days: int = Field(14, ge=1, description="Raw samples (PostgreSQL: whole daily partitions).")
    process_days: int | None = Field(
        None,
        ge=1,
        description=(
            "Per-process GPU readings (gpu_process_packs), if shorter than raw_days: ~22 % of raw "
            "bytes, read by no view (forensics). None: raw_days."
        ),
    )
    minute_days: int = Field(
        14,
        ge=1,
        description=(
            "Per-minute rollups (gpu_minutes, job_minutes, node_minutes), which the classifier reads "
            "and views read for the ranges they cover."
        ),
    )
    rollup_days: int = Field(
        400, ge=1, description="Hourly rollups (gpu_hours, node_hours), which views read before the minutes."
    )
    batch_record_days: int = Field(
        30,
        ge=1,
        description="Batch ids kept for idempotency; at least raw_days, so a late re-send is still caught.",
    )
    run_every_s: float = Field(3600.0, ge=60)

    @model_validator(mode="after")
    def _horizons(self) -> RetentionConfig:
        if self.batch_record_days < self.raw_days:
            raise ValueError("batch_record_days must be >= raw_days (a re-sent batch would be stored again)")
        if self.minute_days < self.raw_days:
            raise ValueError(
                "minute_days must be >= raw_days (late samples re-roll minutes up to raw_days back)"
            )
        if self.rollup_days < self.minute_days:
            raise ValueError("rollup_days must be >= minute_days (hours are folded from the minutes)")
        if self.process_days is not None and self.process_days > self.raw_days:
            raise ValueError("process_days must be <= raw_days (it can only keep process rows for less)")
        return self


class ClassifyConfig(Thresholds):
    """``[classify]``: every threshold of :class:`~gpuwatch.config.thresholds.Thresholds`,
    plus how often the daemon evaluates running jobs."""

    evaluate_interval_s: float = Field(
        120.0,
        ge=30,
        description="Evaluate running jobs this often, on the clock (at :10 past a minute boundary, "
        "after the minute's rollup), the first time within a minute of start.",
    )


class ReportConfig(Section):
    """``gpuwatch report`` (docs/cli.md): what turns the GPUs' energy into CO2 and GPU-hours
    into cost."""

    grid_co2_kg_per_kwh: float | None = Field(
        None,
        ge=0,
        le=2,
        description="Carbon intensity of the site's electricity, kg CO2e per kWh (e.g. 0.4); "
        "unset: no CO2 figure.",
    )
    gpu_hour_price: float | None = Field(
        None,
        ge=0,
        description="What one GPU-hour costs (in `currency`); unset: no cost figure unless "
        "`billing_hour_price` is set.",
    )
    billing_hour_price: float | None = Field(
        None,
        ge=0,
        description="What one hour of one unit of Slurm's TRES `billing` costs (the site's "
        "TRESBillingWeights); takes precedence over `gpu_hour_price` for jobs whose billing Slurm gave.",
    )
    currency: str = Field("", max_length=8, description="Shown after cost figures, e.g. EUR.")


def default_database_url() -> str:
    """SQLite under the user's data dir: the embedded default for one machine and demos."""
    data = Path(platformdirs.user_data_dir("gpuwatch"))
    return f"sqlite:///{data / 'gpuwatch.db'}"


class DatabaseConfig(Section):
    url: str = Field(default_factory=default_database_url)
    echo: bool = False

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if value.startswith("postgres://"):
            value = "postgresql://" + value[len("postgres://") :]
        if value.startswith("postgresql://"):
            value = "postgresql+psycopg://" + value[len("postgresql://") :]
        if not value.startswith(("sqlite://", "postgresql+psycopg://")):
            raise ValueError("must be a sqlite:/// or postgresql:// URL")
        return value


class Settings(BaseSettings):
    """The whole configuration; see ``deploy/gpuwatch.toml``."""

    model_config = SettingsConfigDict(
        env_prefix="GPUWATCH_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    agent: AgentConfig = Field(default_factory=AgentConfig)
    daemon: DaemonConfig = Field(default_factory=DaemonConfig)
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    gpu: GpuConfig = Field(default_factory=GpuConfig)
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    classify: ClassifyConfig = Field(default_factory=ClassifyConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)
    web: WebConfig = Field(default_factory=WebConfig)
    host_paths: HostPaths = Field(default_factory=HostPaths)

    def with_overrides(self, **sections: dict[str, Any]) -> Settings:
        """A validated copy with some keys of some sections replaced (demo, tests, validate)."""
        data = self.model_dump()
        for section, values in sections.items():
            data[section] = {**data[section], **values}
        try:
            return Settings.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(_format_error(exc, "overrides")) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_path = _CONFIG_FILE_CONTEXT.get("path")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_path))
        return tuple(sources)


_CONFIG_FILE_CONTEXT: dict[str, Path | None] = {"path": None}


def _format_error(exc: ValidationError, origin: str) -> str:
    """One line per error naming its key and the value given; a whole section's value is left
    out (a check across keys fails on the section, whose other keys may hold secrets)."""
    lines = [f"invalid configuration ({origin}):"]
    for err in exc.errors():
        key = ".".join(str(part) for part in err["loc"]) or "(root)"
        given = err.get("input")
        got = "" if isinstance(given, Mapping) else f" (got {given!r})"
        lines.append(f"  {key}: {err['msg']}{got}")
    return "\n".join(lines)


def load_settings(path: Path | str | None = None, **overrides: Any) -> Settings:
    """Load and validate the configuration once, at start-up.

    ``path`` None means ``$GPUWATCH_CONFIG`` or the system file if present; an explicit
    path that does not exist is an error. ``overrides`` are nested dicts per section
    (``database={"url": ...}``), used by the CLI's own flags and by tests.
    """
    explicit = path is not None or "GPUWATCH_CONFIG" in os.environ
    chosen = Path(path or os.environ.get("GPUWATCH_CONFIG") or DEFAULT_CONFIG_PATH)
    if not chosen.exists():
        if explicit:
            raise ConfigError(f"config file {chosen} does not exist")
        chosen_or_none: Path | None = None
    else:
        chosen_or_none = chosen
    if os.environ.get("GPUWATCH_DB") and "database" not in overrides:
        overrides["database"] = {"url": os.environ["GPUWATCH_DB"]}
    origin = str(chosen_or_none) if chosen_or_none else "defaults and environment"
    _CONFIG_FILE_CONTEXT["path"] = chosen_or_none
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc, origin)) from None
    except (OSError, ValueError) as exc:  # TOML syntax errors surface as ValueError
        raise ConfigError(f"cannot read config {origin}: {exc}") from None
    finally:
        _CONFIG_FILE_CONTEXT["path"] = None
