"""``sickbay collect slurm``: job and node state changes from Slurm onto the raw-logs topic.

Three sources, one output shape. The slurmctld log (when readable) is tailed line
by line; ``squeue --json`` / ``sinfo --json`` are polled and diffed; ``sacct``
adds exit codes of jobs that finished between polls when accounting exists.
Everything leaves as sickbay line records (:class:`schemas.raw.SickbayLineRecord`)
keyed by the controller host, so the extractor's existing ``slurm.*`` rules and
the correlator's topology need nothing new:

- the log's own lines go out unchanged;
- a poll-seen allocation, completion or requeue is written as the line slurmctld
  itself writes for it (``sched: Allocate JobId=… NodeList=…``, ``_job_complete:
  JobId=… WEXITSTATUS n``, ``Requeuing JobId=…``), so topology works from polling
  alone. These are only synthesised when the log is *not* tailed: with both, the
  log's millisecond timestamps and the poll's whole seconds would look like two
  allocations of one job;
- every job state change also becomes one ``JobState=… Reason=…`` line (the
  ``scontrol show job`` wording, so ``scheduler.slurm_job_state`` sees NODE_FAIL,
  TIMEOUT, …), and every node change one ``node … state … Reason=…`` line.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Protocol

from connectors.sources.slurm_sacct import SacctUnavailable, check_available, parse_sacct, sacct_argv
from connectors.sources.slurm_snapshot import (
    Change,
    SinfoNode,
    SlurmJsonError,
    SqueueJob,
    diff_jobs,
    diff_nodes,
    parse_sinfo,
    parse_squeue,
)
from schemas import codec
from schemas.base import utcnow
from schemas.collector import Reach
from schemas.jobs import JobInfo
from schemas.raw import SickbayLineRecord

log = logging.getLogger("sickbay.collect.slurm")

SOURCE_SQUEUE = "slurm:squeue"
SOURCE_SINFO = "slurm:sinfo"
SOURCE_SACCT = "slurm:sacct"
SOURCE_TRIGGER = "slurm:strigger"
MAX_REMEMBERED_ENDS = 10_000
MAX_PROBLEMS = 20


class RecordSink(Protocol):
    """What the collector produces into (``connectors.kafka.ReliableProducer`` in production)."""

    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> None: ...


class CommandRunner(Protocol):
    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]: ...


def slurm_runner(slurm_conf: Path | None, timeout_s: float = 30.0) -> CommandRunner:
    """Run Slurm's own clients with argv lists (never a shell), pointed at ``slurm_conf`` if given."""
    env = {**os.environ, **({"SLURM_CONF": str(slurm_conf)} if slurm_conf else {})}

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                argv, capture_output=True, text=True, env=env, timeout=timeout_s, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: {exc}")

    return run


@dataclass
class SlurmCoverage:
    """What the collector reached: the connector report behind each verdict's coverage."""

    squeue_ok: int = 0
    squeue_failed: int = 0
    squeue_error: str | None = None  # the last call's error; None when it answered
    sinfo_ok: int = 0
    sinfo_failed: int = 0
    sinfo_error: str | None = None
    sacct: str = "not tried"  # "available", "unavailable: <why>", "not tried", "off"
    log_file: str | None = None
    log_readable: bool | None = None
    log_position: int = 0
    log_lines: int = 0
    records: int = 0
    changes: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        log.warning("%s", text)
        self.problems = [*self.problems[-(MAX_PROBLEMS - 1) :], text]

    def reached(self) -> list[Reach]:
        out = [
            Reach(
                kind="scheduler",
                target="squeue --json",
                ok=self.squeue_ok > 0 and self.squeue_error is None,
                state=f"{self.squeue_ok} ok, {self.squeue_failed} failed",
                detail=self.squeue_error,
            ),
            Reach(
                kind="scheduler",
                target="sinfo --json",
                ok=self.sinfo_ok > 0 and self.sinfo_error is None,
                state=f"{self.sinfo_ok} ok, {self.sinfo_failed} failed",
                detail=self.sinfo_error,
            ),
        ]
        sacct_state, _, why = self.sacct.partition(": ")
        out.append(
            Reach(
                kind="scheduler",
                target="sacct",
                ok=sacct_state == "available",
                state=sacct_state,
                detail=why or None,
            )
        )
        if self.log_file:
            out.append(
                Reach(
                    kind="file",
                    target=self.log_file,
                    ok=bool(self.log_readable),
                    state="reading" if self.log_readable else "unreadable",
                    position=self.log_position,
                )
            )
        return out

    def counts(self) -> dict[str, int]:
        return {"records": self.records, "log_lines": self.log_lines, "problems": len(self.problems)} | {
            f"changes_{k}": v for k, v in self.changes.items()
        }


def _stamp(t: datetime) -> str:
    """slurmctld's own prefix (``[2026-11-29T18:40:01.123]``), which the extractor reads as event time."""
    return "[" + t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}]"


def job_state_line(job: SqueueJob, t: datetime, before: str | None) -> str:
    reason = job.state_reason or "None"
    return (
        f"{_stamp(t)} sickbay-slurm: JobId={job.job_id} JobName={job.name or '(null)'} "
        f"JobState={job.job_state} Reason={reason} PrevState={before or 'None'} "
        f"NodeList={job.nodes or '(null)'} Restarts={job.restart_cnt}"
    )


def node_state_line(node: SinfoNode, t: datetime, before: str | None) -> str:
    return (
        f"{_stamp(t)} sickbay-slurm: node {node.name} state {before or 'None'} -> {node.full_state} "
        f"Reason={node.reason or 'None'}"
    )


def allocate_line(job: SqueueJob, t: datetime) -> str:
    cpus = f" #CPUs={job.cpus}" if job.cpus else ""
    return (
        f"{_stamp(t)} sched: Allocate JobId={job.job_id} NodeList={job.nodes}{cpus} Partition={job.partition}"
    )


def complete_line(job_id: str | int, how: str, status: int, t: datetime) -> str:
    return f"{_stamp(t)} _job_complete: JobId={job_id} {how} {status}"


class SlurmCollector:
    """Polls, diffs and tails; every output record goes through :meth:`_emit`."""

    def __init__(
        self,
        sink: RecordSink,
        topic: str,
        run: CommandRunner,
        *,
        controller_host: str | None = None,
        log_path: Path | None = None,
        from_start: bool = False,
        use_sacct: bool = True,
        clock: Callable[[], datetime] = utcnow,
        jobs_topic: str | None = None,
        cluster: str = "default",
    ) -> None:
        self.sink = sink
        self.topic = topic
        self.jobs_topic = jobs_topic  # JobInfo (partition, comment) for the decide step's policy
        self.cluster = cluster
        self._job_facts: dict[int, tuple[str, str, int | None]] = {}
        self.run_cmd = run
        self.host = controller_host or socket.gethostname()
        self.log_path = log_path
        self.clock = clock
        self.synthesise = log_path is None
        self.coverage = SlurmCoverage(log_file=str(log_path) if log_path else None)
        self.coverage.sacct = "not tried" if use_sacct else "off"
        self._use_sacct = use_sacct
        self._jobs: dict[int, SqueueJob] | None = None
        self._nodes: dict[str, SinfoNode] | None = None
        self._ended: OrderedDict[str, None] = OrderedDict()  # job ids whose end was already reported
        self._sacct_since: datetime | None = None
        self._last_error: str | None = None
        self._tail_fh: IO[bytes] | None = None
        self._tail_inode: int | None = None
        self._tail_pos = 0
        self._tail_partial = b""
        self._tail_line_no = 0
        self._tail_first = not from_start

    # -- output ---------------------------------------------------------------------------------

    def _emit(
        self, line: str, t: datetime, source: str, job_id: str | None = None, line_no: int | None = None
    ) -> None:
        rec = SickbayLineRecord(
            line=line, host=self.host, file=source, line_no=line_no, time=t, job_id=job_id
        )
        self.sink.produce(self.topic, codec.dumps(rec), key=self.host.encode())
        self.coverage.records += 1

    def _count(self, kind: str) -> None:
        self.coverage.changes[kind] = self.coverage.changes.get(kind, 0) + 1

    def _mark_ended(self, job_id: str) -> bool:
        """True the first time a job's end is seen (squeue and sacct may both see it)."""
        if job_id in self._ended:
            return False
        self._ended[job_id] = None
        while len(self._ended) > MAX_REMEMBERED_ENDS:
            self._ended.popitem(last=False)
        return True

    def _emit_change(self, ch: Change) -> None:
        self._count(ch.kind)
        if ch.job is not None:
            job = ch.job
            jid = str(job.job_id)
            if ch.kind in ("job_state", "job_gone"):
                self._emit(job_state_line(job, ch.time, ch.before), ch.time, SOURCE_SQUEUE, jid)
            elif ch.kind == "job_started":
                self._ended.pop(jid, None)  # a requeued job runs again: its next end is news
                if self.synthesise and job.nodes:
                    self._emit(allocate_line(job, ch.time), ch.time, SOURCE_SQUEUE, jid)
            elif ch.kind == "job_requeued" and self.synthesise:
                self._emit(f"{_stamp(ch.time)} Requeuing JobId={jid}", ch.time, SOURCE_SQUEUE, jid)
            elif ch.kind == "job_ended" and self._mark_ended(jid) and self.synthesise:
                how, status = job.wait_status
                self._emit(complete_line(jid, how, status, ch.time), ch.time, SOURCE_SQUEUE, jid)
            return
        if ch.node is not None:
            node = ch.node
            if ch.kind == "node_state":
                self._emit(node_state_line(node, ch.time, ch.before), ch.time, SOURCE_SINFO)
            elif ch.kind == "node_reason" and self.synthesise:
                # slurmctld's wording for a reason change, so the NHC / drain-reason rules read it
                line = f"{_stamp(ch.time)} update_node: node {node.name} reason set to: {node.reason}"
                self._emit(line, ch.time, SOURCE_SINFO)

    # -- polling --------------------------------------------------------------------------------

    def _read(self, argv: list[str]) -> str | None:
        """stdout of one Slurm client call, or None (counted and reported) when it failed."""
        res = self.run_cmd(argv)
        if res.returncode == 0:
            return res.stdout
        self._last_error = f"{' '.join(argv)}: {res.stderr.strip() or f'exit {res.returncode}'}"
        self.coverage.problem(self._last_error)
        return None

    def _poll_jobs(self, now: datetime) -> bool:
        raw = self._read(["squeue", "--json"])
        try:
            if raw is None:
                return False
            jobs, problems = parse_squeue(raw)
        except SlurmJsonError as exc:
            self._last_error = f"squeue --json: {exc}"
            self.coverage.problem(self._last_error)
            return False
        for p in problems:
            self.coverage.problem(f"squeue --json: {p}")
        for ch in diff_jobs(self._jobs, jobs, now):
            self._emit_change(ch)
        self._publish_job_facts(jobs, now)
        if self._jobs is None:  # jobs already over at start-up were reported before we came
            for job in jobs.values():
                if job.terminal:
                    self._mark_ended(str(job.job_id))
        self._jobs = jobs
        return True

    def _publish_job_facts(self, jobs: dict[int, SqueueJob], now: datetime) -> None:
        """A JobInfo when a job appears or its partition/comment/size changes (not every poll)."""
        if self.jobs_topic is None:
            return
        for job_id, job in jobs.items():
            facts = (job.partition, job.comment, job.node_count)
            if self._job_facts.get(job_id) == facts:
                continue
            self._job_facts[job_id] = facts
            info = JobInfo(
                job_id=str(job_id),
                cluster=self.cluster,
                scheduler="slurm",
                partition=job.partition or None,
                comment=job.comment[:8192] or None,
                num_nodes=job.node_count,
                time=now,
            )
            self.sink.produce(self.jobs_topic, codec.dumps(info), key=str(job_id).encode())
        for gone in set(self._job_facts) - set(jobs):
            del self._job_facts[gone]

    def _poll_nodes(self, now: datetime) -> bool:
        raw = self._read(["sinfo", "--json"])
        try:
            if raw is None:
                return False
            nodes, problems = parse_sinfo(raw)
        except SlurmJsonError as exc:
            self._last_error = f"sinfo --json: {exc}"
            self.coverage.problem(self._last_error)
            return False
        for p in problems:
            self.coverage.problem(f"sinfo --json: {p}")
        for ch in diff_nodes(self._nodes, nodes, now):
            self._emit_change(ch)
        self._nodes = nodes
        return True

    def poll_once(self) -> int:
        """One squeue + sinfo (+ sacct) round; returns the number of records produced."""
        before = self.coverage.records
        now = self.clock()
        cov = self.coverage
        self._last_error = None
        if self._poll_jobs(now):
            cov.squeue_ok, cov.squeue_error = cov.squeue_ok + 1, None
        else:
            cov.squeue_failed, cov.squeue_error = cov.squeue_failed + 1, self._last_error
        self._last_error = None
        if self._poll_nodes(now):
            cov.sinfo_ok, cov.sinfo_error = cov.sinfo_ok + 1, None
        else:
            cov.sinfo_failed, cov.sinfo_error = cov.sinfo_failed + 1, self._last_error
        if self._use_sacct:
            self._poll_sacct(now)
        return self.coverage.records - before

    def _poll_sacct(self, now: datetime) -> None:
        since = self._sacct_since or now - timedelta(minutes=5)
        res = self.run_cmd(sacct_argv(since))
        try:
            check_available(res.stderr, res.returncode)
        except SacctUnavailable as exc:
            self.coverage.sacct = f"unavailable: {exc}"
            self._use_sacct = False  # asked once; a cluster does not grow accounting while we run
            log.info("sacct not used: %s", exc)
            return
        self.coverage.sacct = "available"
        self._sacct_since = now - timedelta(seconds=5)  # overlap: sacct's End has whole seconds
        jobs, problems = parse_sacct(res.stdout)
        for p in problems:
            self.coverage.problem(f"sacct: {p}")
        for job in jobs:
            if job.state == "REQUEUED" or not self._mark_ended(job.job_id):
                continue
            how, status = job.how
            t = job.end or now
            self._count("job_ended")
            if self.synthesise:
                self._emit(complete_line(job.job_id, how, status, t), t, SOURCE_SACCT, job.job_id)

    # -- slurmctld log --------------------------------------------------------------------------

    def tail_log(self) -> int:
        """Read what the log gained since the last call (rotation and truncation start over)."""
        if self.log_path is None:
            return 0
        try:
            st = os.stat(self.log_path)
            if self._tail_fh is None or st.st_ino != self._tail_inode or st.st_size < self._tail_pos:
                if self._tail_fh is not None:
                    self._tail_fh.close()
                self._tail_fh = open(self.log_path, "rb")  # noqa: SIM115 - kept open across polls
                self._tail_inode = st.st_ino
                self._tail_pos = st.st_size if self._tail_first else 0
                self._tail_fh.seek(self._tail_pos)
                self.coverage.log_position = self._tail_pos
                self._tail_partial = b""
            self._tail_first = False
            chunk = self._tail_fh.read(1 << 20)
        except OSError as exc:
            if self.coverage.log_readable is not False:
                self.coverage.problem(f"slurmctld log {self.log_path}: {exc}")
            self.coverage.log_readable = False
            return 0
        self.coverage.log_readable = True
        if not chunk:
            return 0
        self._tail_pos += len(chunk)
        self.coverage.log_position = self._tail_pos
        *lines, self._tail_partial = (self._tail_partial + chunk).split(b"\n")
        now = self.clock()
        n = 0
        for raw in lines:
            self._tail_line_no += 1
            text = raw.rstrip(b"\r").decode("utf-8", errors="replace")
            if text.strip():
                self._emit(text, now, str(self.log_path), None, self._tail_line_no)
                n += 1
        self.coverage.log_lines += n
        return n

    # -- loop -----------------------------------------------------------------------------------

    def run(
        self,
        interval_s: float,
        stop: Callable[[], bool],
        *,
        on_tick: Callable[[], None] | None = None,
        stop_after_s: float | None = None,
    ) -> None:
        started = time.monotonic()
        next_poll = 0.0
        while not stop():
            t = time.monotonic()
            if t >= next_poll:
                self.poll_once()
                next_poll = t + interval_s
            got = self.tail_log()
            if on_tick is not None:
                on_tick()
            if stop_after_s is not None and time.monotonic() - started >= stop_after_s:
                break
            if not got:
                time.sleep(min(0.2, interval_s))


def trigger_line(event: str, args: list[str], t: datetime) -> tuple[str, str | None]:
    """The one line an ``strigger --program`` hook writes, and the job id when the event is a job's.

    strigger passes the node list (node events) or the job id (job events) as the
    program's arguments; the hook adds the event name it was registered for.
    """
    subject = " ".join(args) if args else "(none)"
    job_id = args[0] if event.startswith(("job_", "fini", "time")) and args and args[0].isdigit() else None
    what = f"JobId={job_id}" if job_id else f"nodes={subject}"
    return f"{_stamp(t)} sickbay-slurm: strigger event={event} {what}", job_id


def emit_trigger(sink: RecordSink, topic: str, host: str, event: str, args: list[str], t: datetime) -> None:
    line, job_id = trigger_line(event, args, t)
    rec = SickbayLineRecord(line=line, host=host, file=SOURCE_TRIGGER, time=t, job_id=job_id)
    sink.produce(topic, codec.dumps(rec), key=host.encode())
