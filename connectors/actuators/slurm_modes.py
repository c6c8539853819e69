"""Pick the Slurm executor from settings (``SICKBAY_SLURM_MODE=local|ssh|rest``).

Secrets (the slurmrestd JWT) come from ``SICKBAY_SLURM_REST_TOKEN`` or, better,
a file named by ``SICKBAY_SLURM_REST_TOKEN_FILE`` (``scontrol token`` output,
``SLURM_JWT=...``, is accepted as is). They are held as SecretStr and only
reach the HTTP headers; :func:`describe` never shows them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import SecretStr

from connectors.actuators.slurm_backend import SlurmBackend
from connectors.actuators.slurm_cli import SlurmCli
from connectors.actuators.slurm_rest import SlurmRest
from connectors.actuators.slurm_ssh import SlurmSsh

if TYPE_CHECKING:
    from streams.settings import Settings


class SlurmModeError(ValueError):
    """The settings do not describe a usable executor (a missing host, URL or token)."""


def _token(s: Settings) -> SecretStr | None:
    if s.slurm_rest_token_file is not None:
        try:
            text = s.slurm_rest_token_file.read_text().strip()
        except OSError as exc:
            raise SlurmModeError(f"cannot read SICKBAY_SLURM_REST_TOKEN_FILE: {exc.strerror}") from exc
        text = text.removeprefix("SLURM_JWT=")
        if not text:
            raise SlurmModeError(f"token file {s.slurm_rest_token_file} is empty")
        return SecretStr(text)
    return s.slurm_rest_token


def _control_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"sickbay-ssh-{os.getuid()}"


def backend_from_settings(s: Settings) -> SlurmBackend:
    if s.slurm_mode == "local":
        return SlurmCli(s.slurm_conf, timeout_s=s.slurm_timeout_s)
    if s.slurm_mode == "ssh":
        if not s.slurm_ssh_host:
            raise SlurmModeError("SICKBAY_SLURM_MODE=ssh needs SICKBAY_SLURM_SSH_HOST")
        try:
            return SlurmSsh(
                s.slurm_ssh_host,
                user=s.slurm_ssh_user,
                port=s.slurm_ssh_port,
                key_file=s.slurm_ssh_key,
                known_hosts=s.slurm_ssh_known_hosts,
                timeout_s=s.slurm_timeout_s,
                control_dir=_control_dir() if s.slurm_ssh_control_persist_s > 0 else None,
                control_persist_s=s.slurm_ssh_control_persist_s,
            )
        except ValueError as exc:
            raise SlurmModeError(str(exc)) from exc
    if not s.slurm_rest_url:
        raise SlurmModeError(
            "SICKBAY_SLURM_MODE=rest needs SICKBAY_SLURM_REST_URL (http://host:port or unix:/path)"
        )
    token = _token(s)
    if token is None and not s.slurm_rest_url.startswith("unix:"):
        raise SlurmModeError(
            "slurmrestd over TCP needs a JWT: set SICKBAY_SLURM_REST_TOKEN_FILE (scontrol token)"
        )
    try:
        return SlurmRest(
            s.slurm_rest_url,
            api=s.slurm_rest_api,
            user=s.slurm_rest_user,
            token=token,
            timeout_s=s.slurm_timeout_s,
        )
    except ValueError as exc:
        raise SlurmModeError(str(exc)) from exc


def describe(s: Settings) -> str:
    """One log line about the executor, without secrets."""
    if s.slurm_mode == "ssh":
        return f"ssh {s.slurm_ssh_user or ''}@{s.slurm_ssh_host}:{s.slurm_ssh_port}"
    if s.slurm_mode == "rest":
        auth = "jwt" if (s.slurm_rest_token or s.slurm_rest_token_file) else "local"
        return f"rest {s.slurm_rest_url} {s.slurm_rest_api} (auth {auth})"
    return f"local scontrol (SLURM_CONF={s.slurm_conf or 'default'})"
