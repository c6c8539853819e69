"""The executor seam of the Slurm adapter: one interface, three ways to reach the controller.

- ``local``: ``scontrol``/``scancel`` on this host (:mod:`connectors.actuators.slurm_cli`);
- ``ssh``: the same argv on a control host over SSH, for sites that add no service inside the
  cluster (:mod:`connectors.actuators.slurm_ssh`);
- ``rest``: slurmrestd (:mod:`connectors.actuators.slurm_rest`).

The adapter only plans commands (``*_argv``) and runs them, so its observe-before-act
logic is the same in every mode. A REST "argv" is ``[METHOD, path, body]``: it is
what the audit records, never a shell string.
"""

from __future__ import annotations

from typing import Protocol

from schemas.actions import CommandRun


class Unsupported(Exception):
    """The backend cannot carry out this operation (e.g. no endpoint in this slurmrestd version)."""


class SlurmBackend(Protocol):
    mode: str

    def run(self, argv: list[str]) -> CommandRun: ...

    def show(self, entity: str, name: str) -> tuple[CommandRun, dict[str, str] | None]:
        """``entity`` is ``node`` or ``job``; the state in ``scontrol show -o`` keys, None when absent."""
        ...

    def list_nodes(self) -> tuple[CommandRun, list[dict[str, str]]]: ...

    def transient(self, run: CommandRun) -> bool:
        """True when the command did not reach the controller and another try may succeed."""
        ...

    def not_found(self, run: CommandRun) -> bool:
        """True when the controller answered that the node or job does not exist."""
        ...

    def drain_argv(self, node: str, reason: str) -> list[str]: ...

    def resume_argv(self, node: str) -> list[str]: ...

    def requeue_hold_argv(self, job_id: str) -> list[str]: ...

    def release_argv(self, job_id: str) -> list[str]: ...

    def exclude_argv(self, job_id: str, nodes: list[str]) -> list[str]: ...

    def begin_argv(self, job_id: str, delay_s: int) -> list[str]: ...

    def cancel_argv(self, job_id: str) -> list[str]: ...
