"""``sickbay modes`` (observe/act at runtime) and ``sickbay policy`` (check/explain the policy file)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Annotated

import orjson
import typer

from connectors.kafka import ReliableProducer, wait_for_broker
from schemas import codec
from schemas.actions import Mode, ModeChange, ModeScope
from schemas.audit import AuditRecord
from schemas.base import utcnow
from schemas.incidents import Category
from schemas.jobs import JobInfo
from streams.cli.errors import fail
from streams.decide.policy_config import PolicyFile
from streams.settings import Settings

modes_app = typer.Typer(no_args_is_help=True, help="Observe/act mode per cluster, partition or category.")
policy_app = typer.Typer(no_args_is_help=True, help="The recovery policy file.")


def mount(app: typer.Typer) -> None:
    app.add_typer(modes_app, name="modes")
    app.add_typer(policy_app, name="policy")


@modes_app.command("set")
def modes_set(
    mode: Annotated[Mode, typer.Argument(help="observe or act")],
    reason: Annotated[str, typer.Option("--reason", help="why (kept in the audit trail)")],
    cluster: Annotated[str | None, typer.Option(help="default: the configured cluster")] = None,
    partition: Annotated[str | None, typer.Option(help="narrow to one partition / namespace")] = None,
    category: Annotated[Category | None, typer.Option(help="narrow to one verdict category")] = None,
    actor: Annotated[str, typer.Option(help="who switched it")] = "cli",
) -> None:
    """Publish a mode change; every worker applies it within a second and audits each decision with it."""
    settings = Settings()
    if not reason.strip():
        fail("--reason must not be empty")
    scope = ModeScope(cluster=cluster or settings.cluster, partition=partition, category=category)
    now = utcnow()
    change = ModeChange(
        change_id=f"mode-{uuid.uuid4().hex[:16]}",
        scope=scope,
        mode=mode,
        actor=actor,
        reason=reason,
        time=now,
    )
    audit = AuditRecord(
        audit_id=f"aud-{change.change_id}",
        time=now,
        actor=actor,
        event="mode.changed",
        cluster=scope.cluster,
        mode=mode.value,
        details={"scope": scope.key(), "reason": reason, "change_id": change.change_id},
    )
    try:
        wait_for_broker(settings.kafka_bootstrap, timeout_s=10)
    except Exception as exc:
        fail(f"cannot reach Kafka at {settings.kafka_bootstrap}: {exc}")
    producer = ReliableProducer(settings.kafka_bootstrap, "sickbay-modes-cli")
    cat = settings.topics
    producer.produce(cat.control_modes.name, codec.dumps(change), key=scope.key().encode())
    producer.produce(cat.audit.name, codec.dumps(audit), key=change.change_id.encode())
    if producer.flush(15) > 0:
        fail("mode change not confirmed by the broker")
    typer.echo(
        orjson.dumps({"scope": scope.key(), "mode": mode.value, "change_id": change.change_id}).decode()
    )


@modes_app.command("list")
def modes_list(timeout_s: Annotated[float, typer.Option(help="read for this long")] = 3.0) -> None:
    """The latest change per scope, as the workers see it (reads the compacted topic from the start)."""
    from streams.decide.modes import ModeFollower, ModeRegistry

    settings = Settings()
    registry = ModeRegistry(settings.mode)
    follower = ModeFollower(registry, settings.kafka_bootstrap, settings.topics.control_modes.name)
    try:
        follower.start()
    except Exception as exc:
        fail(f"cannot read {settings.topics.control_modes.name}: {exc}")
    time.sleep(timeout_s)
    follower.stop()
    rows = sorted(registry.snapshot(), key=lambda c: c.scope.key())
    typer.echo(f"default: {settings.mode.value}")
    for change in rows:
        typer.echo(f"{change.scope.key():40s} {change.mode.value:8s} {change.actor:12s} {change.reason}")


@policy_app.command("check")
def policy_check(path: Annotated[Path, typer.Argument(exists=True, dir_okay=False)]) -> None:
    """Validate a policy file (every override merged onto the defaults) and print the effective defaults."""
    try:
        policy = PolicyFile.load(path)
    except Exception as exc:
        fail(f"{path}: {exc}")
    typer.echo(orjson.dumps({"ok": True, "clusters": sorted(policy.clusters)}).decode())


@policy_app.command("explain")
def policy_explain(
    cluster: Annotated[str, typer.Option()],
    partition: Annotated[str | None, typer.Option()] = None,
    comment: Annotated[str | None, typer.Option(help="a Slurm job comment, e.g. an APS JSON object")] = None,
    path: Annotated[
        Path | None, typer.Option("--file", help="policy file (default: SICKBAY_POLICY_FILE)")
    ] = None,
) -> None:
    """The effective job policy for a cluster/partition/comment, and any override that was refused."""
    settings = Settings()
    file = path or settings.policy_file
    try:
        policy = PolicyFile.load(file) if file else PolicyFile()
    except Exception as exc:
        fail(f"{file}: {exc}")
    info = JobInfo(job_id="explain", cluster=cluster, partition=partition, comment=comment, time=utcnow())
    effective, notes = policy.resolve(cluster, partition, info)
    typer.echo(
        orjson.dumps(
            {
                "policy": effective.model_dump(),
                "valves": policy.valves_for(cluster).model_dump(),
                "notes": notes,
            },
            option=orjson.OPT_INDENT_2,
        ).decode()
    )
