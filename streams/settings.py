"""Settings for every sickbay process, from the environment (``SICKBAY_*``) and an optional TOML file.

Precedence: explicit arguments > environment > ``$SICKBAY_CONFIG`` (or ``./sickbay.toml``) > defaults.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field
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

    # Faust worker
    app_id: str = "sickbay"
    faust_store: str = "rocksdb://"
    faust_web_port: int = 6066
    faust_web_enabled: bool = False
    faust_session_timeout_s: float = 10.0
    faust_heartbeat_s: float = 2.0
    faust_rebalance_timeout_s: float = 20.0
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    # Correlation timing
    root_grace_s: float = Field(default=20.0, ge=0, description="wait this long for a root after a cascade")
    incident_quiet_s: float = Field(
        default=120.0, gt=0, description="close an incident after this much quiet"
    )
    refine_interval_s: float = Field(default=1.0, gt=0, description="coalesce refined revisions")
    unclaimed_grace_s: float = Field(
        default=30.0, ge=0, description="a node fact no job claims within this long becomes a node incident"
    )
    lateness_s: float = Field(default=300.0, ge=0, description="bounded lateness/clock skew across sources")
    max_isolate_per_incident: int = Field(default=2, ge=0, description="blast-radius cap per incident")

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
