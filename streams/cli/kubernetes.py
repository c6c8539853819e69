"""``sickbay adapter kubernetes`` and ``sickbay collect kubernetes``.

Both take the cluster's credentials from ``--kubeconfig``, ``SICKBAY_KUBECONFIG``, ``KUBECONFIG``, the
in-cluster service account or ``~/.kube/config`` (in that order); nothing prints them.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from streams.cli.errors import fail
from streams.settings import Settings

KubeconfigOpt = Annotated[str | None, typer.Option(help="kubeconfig file (default: env / in-cluster)")]


def adapter_kubernetes(
    kubeconfig: KubeconfigOpt = None,
    idle_exit: Annotated[float | None, typer.Option(help="exit after N idle seconds")] = None,
    sweep_every: Annotated[
        float | None, typer.Option(help="every N seconds, restore nodes whose sickbay quarantine expired")
    ] = None,
    settle: Annotated[float, typer.Option(help="seconds to wait for a controller after suspend")] = 30.0,
) -> None:
    """Execute actions on Kubernetes (cordon/taint, restart PyTorchJob/TrainJob, requeue Kueue workloads)."""
    import logging
    import sys

    from connectors.actuators.kubernetes_adapter import KubernetesAdapter
    from connectors.actuators.kubernetes_client import make_client
    from connectors.actuators.runner import run_adapter

    s = Settings()
    logging.basicConfig(level=s.log_level.upper(), stream=sys.stderr)
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one INFO line per request otherwise
    try:
        client = make_client(kubeconfig)
    except (FileNotFoundError, OSError, ValueError) as exc:
        fail(f"no Kubernetes credentials: {exc}")
    n = run_adapter(
        s.kafka_bootstrap,
        s.topics,
        KubernetesAdapter(client, settle_s=settle),
        s.cluster,
        group_id=f"{s.topic_prefix}-adapter-kubernetes",
        idle_exit_s=idle_exit,
        sweep_every_s=sweep_every,
        scheduler="kubernetes",
    )
    typer.echo(f"adapter kubernetes: handled {n} actions", err=True)


def collect_kubernetes(
    kubeconfig: KubeconfigOpt = None,
    namespace: Annotated[str | None, typer.Option(help="watch one namespace (default: all)")] = None,
    offsets: Annotated[
        Path | None, typer.Option(help="resourceVersion file (default: <state_dir>/kubernetes-watch.json)")
    ] = None,
    stop_after: Annotated[float | None, typer.Option(help="stop after N seconds")] = None,
    idle_exit: Annotated[float | None, typer.Option(help="stop after N seconds without a change")] = None,
) -> None:
    """Watch Events, Pods, Nodes, PyTorchJobs, TrainJobs, Kueue Workloads → raw-logs + topology topics."""
    import logging
    import socket
    import sys

    from connectors.kafka import ReliableProducer
    from connectors.sources.kubernetes_watch import KubeWatchCollector, Offsets, Topics, make_async_client
    from schemas import codec
    from schemas.base import utcnow
    from schemas.collector import CollectorReport, Reach

    s = Settings()
    logging.basicConfig(level=s.log_level.upper(), stream=sys.stderr)
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one INFO line per request otherwise
    try:
        client = make_async_client(kubeconfig)
        store = Offsets(offsets or s.state_dir / "kubernetes-watch.json")
    except (FileNotFoundError, OSError, ValueError) as exc:
        fail(str(exc))
    producer = ReliableProducer(s.kafka_bootstrap, "sickbay-collect-kubernetes", linger_ms=5)
    topics = Topics(
        s.topics.raw_logs.name,
        s.topics.topology_node.name,
        s.topics.topology_jobs.name,
        s.topics.signals_job.name,
    )
    collector = KubeWatchCollector(client, producer, topics, store, cluster=s.cluster, namespace=namespace)
    started = utcnow()
    try:
        coverage = asyncio.run(collector.run(stop_after_s=stop_after, idle_exit_s=idle_exit))
    except RuntimeError as exc:
        fail(str(exc), 1)
    report = CollectorReport(
        collector="kubernetes",
        host=socket.gethostname(),
        time=utcnow(),
        started=started,
        final=True,
        reached=[
            Reach(kind="api", target=kind, ok=state == "watching", state=state.split(" ", 1)[0], detail=state)
            for kind, state in sorted(coverage.kinds.items())
        ],
        broker_reachable=producer.mode == "direct" and not producer.broker_down,
        producer_mode=producer.mode,
        counts={"records": coverage.records, "assignments": coverage.assignments, "jobs": coverage.jobs},
    )
    producer.produce(s.topics.collector_reports.name, codec.dumps(report), key=(report.host or "-").encode())
    producer.flush(10)
    typer.echo(
        json.dumps(
            {
                "records": coverage.records,
                "assignments": coverage.assignments,
                "jobs": coverage.jobs,
                "kinds": coverage.kinds,
            }
        ),
        err=True,
    )
