"""SICKBAY_SLURM_MODE picks the executor; secrets come from env or files and never reach a log line."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.actuators.slurm_cli import SlurmCli
from connectors.actuators.slurm_modes import SlurmModeError, backend_from_settings, describe
from connectors.actuators.slurm_rest import SlurmRest
from connectors.actuators.slurm_ssh import SlurmSsh
from streams.settings import Settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no ./sickbay.toml
    monkeypatch.delenv("SICKBAY_CONFIG", raising=False)


def test_local_is_the_default():
    assert isinstance(backend_from_settings(Settings()), SlurmCli)


def test_ssh_mode_reads_host_port_user_key_and_known_hosts_from_the_environment(monkeypatch):
    monkeypatch.setenv("SICKBAY_SLURM_MODE", "ssh")
    monkeypatch.setenv("SICKBAY_SLURM_SSH_HOST", "ctl")
    monkeypatch.setenv("SICKBAY_SLURM_SSH_PORT", "2222")
    monkeypatch.setenv("SICKBAY_SLURM_SSH_USER", "sickbay")
    monkeypatch.setenv("SICKBAY_SLURM_SSH_KEY", "/k")
    monkeypatch.setenv("SICKBAY_SLURM_SSH_KNOWN_HOSTS", "/kh")
    backend = backend_from_settings(Settings())
    assert isinstance(backend, SlurmSsh)
    assert backend.ssh_argv()[-1] == "ctl" and "UserKnownHostsFile=/kh" in backend.ssh_argv()


def test_ssh_mode_without_a_host_is_a_clear_settings_error(monkeypatch):
    monkeypatch.setenv("SICKBAY_SLURM_MODE", "ssh")
    with pytest.raises(SlurmModeError, match="SICKBAY_SLURM_SSH_HOST"):
        backend_from_settings(Settings())


def test_rest_over_tcp_needs_a_token(monkeypatch):
    monkeypatch.setenv("SICKBAY_SLURM_MODE", "rest")
    monkeypatch.setenv("SICKBAY_SLURM_REST_URL", "http://ctl:6820")
    with pytest.raises(SlurmModeError, match="needs a JWT"):
        backend_from_settings(Settings())


def test_rest_over_a_unix_socket_needs_none(monkeypatch):
    monkeypatch.setenv("SICKBAY_SLURM_MODE", "rest")
    monkeypatch.setenv("SICKBAY_SLURM_REST_URL", "unix:/run/slurmrestd.sock")
    assert isinstance(backend_from_settings(Settings()), SlurmRest)


def test_the_token_file_may_hold_scontrol_token_output_and_is_sent_not_shown(monkeypatch, tmp_path: Path):
    token = "eyJhbGciOiJIUzI1NiJ9.payload.signature"  # noqa: S105 - a fake token
    (tmp_path / "jwt").write_text(f"SLURM_JWT={token}\n")
    monkeypatch.setenv("SICKBAY_SLURM_MODE", "rest")
    monkeypatch.setenv("SICKBAY_SLURM_REST_URL", "http://ctl:6820")
    monkeypatch.setenv("SICKBAY_SLURM_REST_USER", "sickbay")
    monkeypatch.setenv("SICKBAY_SLURM_REST_TOKEN_FILE", str(tmp_path / "jwt"))
    s = Settings()
    backend = backend_from_settings(s)
    assert isinstance(backend, SlurmRest)
    assert backend.client.headers["X-SLURM-USER-TOKEN"] == token
    assert token not in describe(s) and token not in repr(s)


def test_a_token_in_the_environment_is_a_secret_in_settings(monkeypatch):
    monkeypatch.setenv("SICKBAY_SLURM_REST_TOKEN", "tok-123")
    s = Settings()
    assert s.slurm_rest_token is not None and s.slurm_rest_token.get_secret_value() == "tok-123"
    assert "tok-123" not in repr(s) and "tok-123" not in s.model_dump_json()


def test_an_unreadable_token_file_is_a_settings_error(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("SICKBAY_SLURM_MODE", "rest")
    monkeypatch.setenv("SICKBAY_SLURM_REST_URL", "http://ctl:6820")
    monkeypatch.setenv("SICKBAY_SLURM_REST_TOKEN_FILE", str(tmp_path / "missing"))
    with pytest.raises(SlurmModeError, match="cannot read SICKBAY_SLURM_REST_TOKEN_FILE"):
        backend_from_settings(Settings())
