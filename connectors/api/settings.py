"""The API's own settings: listen address and bearer tokens (``SICKBAY_API_*``)."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class ApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SICKBAY_API_", extra="ignore", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8088, ge=1, le=65535)
    token: SecretStr | None = Field(default=None, description="bearer token for mutations (and reads)")
    read_token: SecretStr | None = Field(default=None, description="bearer token that may only read")
