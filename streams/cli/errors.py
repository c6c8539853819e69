"""How every ``sickbay`` command reports a failure: one red line on stderr and an exit code."""

from __future__ import annotations

from typing import NoReturn

import typer


def fail(message: str, code: int = 2, prefix: str = "sickbay") -> NoReturn:
    typer.secho(f"{prefix}: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)
