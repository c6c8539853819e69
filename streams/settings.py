"""Settings for every sickbay process, from the environment (``SICKBAY_*``) and an optional TOML file.

Precedence: explicit arguments > environment > ``$SICKBAY_CONFIG`` (or ``./sickbay.toml``) > defaults.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from schemas.actions import Mode
from schemas.topics import TopicCatalog

REPO_ROOT = Path(__file__).resolve().parent.parent


def _default_state_dir() -> Path:
    return REPO_ROOT / ".cache" / "stack"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SICKBAY_", extra="ignore", frozen=True)

    cluster: str = "local"
    kafka_bootstrap: str = "127.0.0.1:39092"
    topic_prefix: str = "sickbay"
    partitions: int = Field(default=4, ge=1)
    replication_factor: int = Field(default=1, ge=1)

    mode: Mode = Mode.OBSERVE
    state_dir: Path = Field(default_factory=_default_state_dir)

    # ClickHouse: a server URL wins; otherwise the embedded engine (chdb) under state_dir.
    clickhouse_url: str | None = Field(
        default=None, validation_alias=AliasChoices("CLICKHOUSE_URL", "SICKBAY_CLICKHOUSE_URL")
    )
    clickhouse_database: str = Field(default="sickbay", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    chdb_path: Path | None = None

    slurm_conf: Path | None = Field(
        default=None, validation_alias=AliasChoices("SLURM_CONF", "SICKBAY_SLURM_CONF")
    )
    # How the Slurm adapter reaches the controller (connectors/actuators/slurm_backend.py): local scontrol,
    # the same argv over SSH on a control host, or slurmrestd. Secrets come from env or files, never logged.
    slurm_mode: Literal["local", "ssh", "rest"] = "local"
    slurm_ssh_host: str | None = None
    slurm_ssh_port: int = Field(default=22, ge=1, le=65535)
    slurm_ssh_user: str | None = None
    slurm_ssh_key: Path | None = Field(default=None, description="private key file (BatchMode: no prompts)")
    slurm_ssh_known_hosts: Path | None = Field(default=None, description="known_hosts; host keys are checked")
    slurm_ssh_control_persist_s: int = Field(default=60, ge=0, description="share one connection; 0: off")
    slurm_rest_url: str | None = Field(default=None, description="http(s)://host:port or unix:/path")
    slurm_rest_api: Literal["v0.0.38", "v0.0.39"] = "v0.0.38"
    slurm_rest_user: str | None = None
    slurm_rest_token: SecretStr | None = Field(default=None, description="JWT (scontrol token); or a file")
    slurm_rest_token_file: Path | None = Field(default=None, description="file holding the JWT")
    slurm_timeout_s: float = Field(default=30.0, gt=0)
    slurm_retries: int = Field(default=3, ge=0, description="extra tries when the controller was not reached")
    slurm_retry_backoff_s: float = Field(default=0.5, ge=0, description="first backoff; doubles each try")

    # Faust worker
    app_id: str = "sickbay"
    faust_store: str = "rocksdb://"
    faust_web_port: int = 6066
    faust_web_enabled: bool = False
    faust_session_timeout_s: float = 10.0
    faust_heartbeat_s: float = 2.0
    faust_rebalance_timeout_s: float = 20.0
    faust_commit_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="how often the worker commits what its agents handled; a longer one replays more "
        "after a kill -9 (tests hold commits back with it)",
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # raw.logs → signals: "batched" reads and writes in batches with confluent-kafka beside the Faust
    # agents (streams/extract/batched.py, consumer group "<app_id>-extract"); "agent" is Faust's
    # per-message agent (in-memory tests, or a fallback). Same rules, same signal ids either way.
    extract_stage: Literal["batched", "agent"] = "batched"
    extract_process: bool = Field(
        default=True,
        description="run the batched stage in a child process with its own GIL (else a thread of the "
        "worker, sharing the agents' interpreter); it dies with the worker and the worker with it",
    )
    extract_batch_max: int = Field(
        default=20_000, ge=1, description="raw records per read (a backlog fills it, live traffic rarely)"
    )
    extract_poll_s: float = Field(
        default=0.05, gt=0, description="longest wait for a batch to fill (adds at most this latency)"
    )
    take_max: int = Field(
        default=64,
        ge=1,
        description="messages the correlate and route agents each handle as one take (a table write per key)",
    )
    take_s: float = Field(
        default=0.05, gt=0, description="longest wait for a take to fill (adds at most this latency)"
    )
    gil_switch_interval_s: float | None = Field(
        default=None,
        gt=0,
        le=0.1,
        description="sys.setswitchinterval for the worker; unset: 0.5 ms when the extract stage is a thread "
        "of the worker (it and the event loop share one GIL, and at Python's 5 ms the loop waits for the "
        "busy thread after each socket call), Python's 5 ms when it runs in its own process",
    )

    # Correlation timing
    root_grace_s: float = Field(default=20.0, ge=0, description="wait this long for a root after a cascade")
    incident_quiet_s: float = Field(
        default=120.0, gt=0, description="close an incident after this much quiet"
    )
    refine_interval_s: float = Field(default=1.0, gt=0, description="coalesce refined revisions")
    provisional_after_s: float | None = Field(
        default=0.5,
        ge=0,
        description=(
            "publish a cascade-only verdict as provisional once its window is this old, inside the root "
            "grace (the decide step waits for the final revision); off: say nothing until the grace ends"
        ),
    )

    @field_validator("provisional_after_s", "unclaimed_probe_s", mode="before")
    @classmethod
    def _off_is_unset(cls, value: object) -> object:
        """``SICKBAY_PROVISIONAL_AFTER_S=off`` (or empty) turns provisional verdicts off, and
        ``SICKBAY_UNCLAIMED_PROBE_S=off`` the backlog probe."""
        return None if isinstance(value, str) and value.strip().lower() in ("", "off", "none") else value

    unclaimed_grace_s: float = Field(
        default=30.0, ge=0, description="a node fact no job claims within this long becomes a node incident"
    )
    unclaimed_probe_s: float | None = Field(
        default=5.0,
        gt=0,
        description=(
            "while node facts wait for their job, ask the broker this often whether the groups reading "
            "the topology path are behind; while they are, the grace starts again (capped by the "
            "lateness bound). off: the grace is wall-clock alone"
        ),
    )
    lateness_s: float = Field(default=300.0, ge=0, description="bounded lateness/clock skew across sources")
    max_isolate_per_incident: int = Field(default=2, ge=0, description="blast-radius cap per incident")

    # Hang, straggler and node-health detectors (streams/correlate/progress.py, straggler.py,
    # node_health.py)
    detectors: bool = Field(default=True, description="run the progress and gpu_health agents")
    hang_multiple: float = Field(default=5.0, gt=1, description="hang: silence > this x the recent period")
    hang_floor_s: float = Field(default=300.0, ge=0, description="hang: never declared before this silence")
    hang_check_interval_s: float = Field(default=5.0, gt=0, description="how often the hang timer looks")
    detector_clock: Literal["wall", "event"] = Field(
        default="wall",
        description="wall: silence against the wall clock; event: against the newest event time seen "
        "(replays faster than real time, e.g. the scoreboard)",
    )
    straggler_threshold: float = Field(
        default=0.75, gt=0, lt=1, description="straggler: best median / current median below this"
    )
    straggler_throttled_threshold: float = Field(
        default=0.9,
        gt=0,
        lt=1,
        description="straggler: the threshold when the GPU reports a HW throttle reason",
    )
    straggler_sustain_s: float = Field(
        default=120.0, ge=0, description="straggler: the score stays below the threshold this long"
    )
    straggler_min_samples: int = Field(default=3, ge=1, description="straggler: and for this many samples")
    straggler_early_warning: bool = Field(
        default=True,
        description="straggler: publish a provisional incident at a GPU's first throttled slow sample "
        "(never acted on; the sustained finding follows)",
    )
    node_health_threshold: float = Field(
        default=0.5, gt=0, lt=1, description="node health: a pre-emptive degrading incident below this"
    )
    node_health_half_life_s: float = Field(
        default=6 * 3600.0, gt=0, description="node health: evidence weight halves this often"
    )
    policy_file: Path | None = Field(
        default=None,
        description="recovery policy TOML (defaults, per-cluster/partition overrides, fleet valves)",
    )
    follow_modes: bool = Field(default=True, description="apply runtime mode changes from control.modes")

    @property
    def topics(self) -> TopicCatalog:
        return TopicCatalog(prefix=self.topic_prefix, partitions=self.partitions, app_id=self.app_id)

    @property
    def chdb_dir(self) -> Path:
        return self.chdb_path or (self.state_dir / "chdb")

    @property
    def clickhouse_dsn(self) -> str:
        return self.clickhouse_url or f"chdb://{self.chdb_dir.resolve()}"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = Path(os.environ.get("SICKBAY_CONFIG", "sickbay.toml"))
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_file.is_file():
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)
