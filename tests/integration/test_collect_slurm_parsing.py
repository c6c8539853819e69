"""The Slurm collector's parsers on the shapes Slurm writes (no cluster needed: sacct is not
enabled on the local stack, and 23.02's JSON is not what it runs)."""

from __future__ import annotations

from datetime import UTC, datetime

from connectors.sources.slurm_collector import trigger_line
from connectors.sources.slurm_sacct import SacctUnavailable, check_available, parse_sacct, sacct_argv
from connectors.sources.slurm_snapshot import SqueueJob, diff_jobs, parse_squeue
from schemas import codec

NOW = datetime(2026, 11, 29, 21, 0, tzinfo=UTC)

SACCT = """\
4711|train|FAILED|1:0|gpu-[01-04]|2026-11-29T20:01:02|2026-11-29T20:44:10
4712|train|CANCELLED by 0|0:15|gpu-02|2026-11-29T20:05:00|2026-11-29T20:06:00
4713|eval|NODE_FAIL|0:0|gpu-03|2026-11-29T20:07:00|2026-11-29T20:08:00
4714|bad|COMPLETED|zero|gpu-01|2026-11-29T20:07:00|2026-11-29T20:08:00
"""


def test_sacct_text_exit_codes_are_read_as_status_and_signal():
    jobs, problems = parse_sacct(SACCT)
    by_id = {j.job_id: j for j in jobs}
    assert by_id["4711"].how == ("WEXITSTATUS", 1)
    assert (by_id["4712"].state, by_id["4712"].how) == ("CANCELLED", ("WTERMSIG", 15))
    assert by_id["4713"].end == datetime(2026, 11, 29, 20, 8, tzinfo=UTC)
    assert problems == ["job 4714: exit code 'zero' is not N:M"]


def test_sacct_without_accounting_is_reported_unavailable_not_parsed():
    try:
        check_available("Slurm accounting storage is disabled\n", 1)
    except SacctUnavailable as exc:
        assert "accounting storage is disabled" in str(exc)
    else:
        raise AssertionError("expected SacctUnavailable")


def test_sacct_is_asked_for_text_columns_by_name_never_json():
    argv = sacct_argv(NOW)
    assert "--json" not in argv and "-P" in argv
    assert argv[argv.index("-o") + 1] == "JobID,JobName,State,ExitCode,NodeList,Start,End"


def test_squeue_2302_wrapped_numbers_and_state_lists_read_like_2205():
    doc = {
        "errors": [],
        "jobs": [
            {
                "job_id": 9,
                "job_state": ["RUNNING"],
                "nodes": "gpu-[01-02]",
                "start_time": {"set": True, "infinite": False, "number": 1795986353},
                "end_time": {"set": False, "infinite": False, "number": 0},
                "restart_cnt": {"set": True, "number": 1},
                "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True, "number": 0}},
            },
            {"job_id": "not-a-number", "job_state": "RUNNING"},
        ],
    }
    jobs, problems = parse_squeue(codec.dumps(doc))
    job = jobs[9]
    assert (job.job_state, job.start_time, job.end_time, job.restart_cnt) == ("RUNNING", 1795986353, None, 1)
    assert len(problems) == 1 and problems[0].startswith("job not-a-number")


def test_a_job_that_started_and_ended_between_two_polls_still_yields_start_then_end():
    pending = SqueueJob(job_id=5, job_state="PENDING")
    done = SqueueJob(
        job_id=5, job_state="COMPLETED", nodes="gpu-01", start_time=100, end_time=101, exit_code=0
    )
    kinds = [c.kind for c in diff_jobs({5: pending}, {5: done}, NOW)]
    assert kinds == ["job_state", "job_started", "job_ended"]


def test_a_job_seen_completing_then_failed_reports_its_end_but_no_second_start():
    completing = SqueueJob(job_id=7, job_state="COMPLETING", nodes="gpu-01", start_time=100)
    failed = SqueueJob(
        job_id=7, job_state="FAILED", nodes="gpu-01", start_time=100, end_time=103, exit_code=768
    )
    kinds = [c.kind for c in diff_jobs({7: completing}, {7: failed}, NOW)]
    assert kinds == ["job_state", "job_ended"]


def test_a_requeued_job_is_reported_as_requeued():
    running = SqueueJob(job_id=6, job_state="RUNNING", nodes="gpu-01", start_time=100)
    requeued = SqueueJob(job_id=6, job_state="PENDING", restart_cnt=1)
    assert [c.kind for c in diff_jobs({6: running}, {6: requeued}, NOW)] == ["job_state", "job_requeued"]


def test_wait_status_follows_slurmctld_job_complete_wording():
    assert SqueueJob(job_id=1, job_state="FAILED", exit_code=768).wait_status == ("WEXITSTATUS", 3)
    assert SqueueJob(job_id=1, job_state="FAILED", exit_code=9).wait_status == ("WTERMSIG", 9)


def test_strigger_hook_writes_one_line_naming_the_job_or_the_nodes():
    line, job_id = trigger_line("node_down", ["gpu-[02-03]"], NOW)
    assert (
        line == "[2026-11-29T21:00:00.000] sickbay-slurm: strigger event=node_down nodes=gpu-[02-03]"
        and job_id is None
    )
    line, job_id = trigger_line("job_fini", ["4711"], NOW)
    assert job_id == "4711" and line.endswith("strigger event=job_fini JobId=4711")


class _Sink:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        self.lines.append(codec.loads(value)["line"])


def _squeue(*jobs: dict[str, object]) -> str:
    return codec.dumps({"errors": [], "jobs": list(jobs)}).decode()


def test_a_job_that_fails_is_requeued_and_fails_again_reports_both_ends():
    import subprocess

    from connectors.sources.slurm_collector import SlurmCollector

    answers = iter(
        [
            _squeue({"job_id": 7, "job_state": "RUNNING", "nodes": "gpu-01", "start_time": 100}),
            _squeue(
                {"job_id": 7, "job_state": "NODE_FAIL", "nodes": "gpu-01", "start_time": 100, "end_time": 110}
            ),
            _squeue({"job_id": 7, "job_state": "PENDING", "restart_cnt": 1}),
            _squeue(
                {"job_id": 7, "job_state": "RUNNING", "nodes": "gpu-02", "start_time": 200, "restart_cnt": 1}
            ),
            _squeue(
                {
                    "job_id": 7,
                    "job_state": "FAILED",
                    "nodes": "gpu-02",
                    "start_time": 200,
                    "end_time": 210,
                    "exit_code": 256,
                    "restart_cnt": 1,
                }
            ),
        ]
    )

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        out = next(answers) if argv[0] == "squeue" else codec.dumps({"errors": [], "nodes": []}).decode()
        return subprocess.CompletedProcess(argv, 0, out, "")

    sink = _Sink()
    col = SlurmCollector(sink, "raw", run, controller_host="ctl", use_sacct=False, clock=lambda: NOW)
    for _ in range(5):
        col.poll_once()
    topology = [line.split("] ", 1)[1] for line in sink.lines if "sickbay-slurm" not in line]
    assert topology == [
        "sched: Allocate JobId=7 NodeList=gpu-01 Partition=",
        "_job_complete: JobId=7 WEXITSTATUS 0",
        "Requeuing JobId=7",
        "sched: Allocate JobId=7 NodeList=gpu-02 Partition=",
        "_job_complete: JobId=7 WEXITSTATUS 1",
    ]
    assert any("JobState=NODE_FAIL" in line for line in sink.lines)


def test_job_facts_with_the_users_aps_comment_are_published_once_per_change():
    import subprocess

    from connectors.sources.slurm_collector import SlurmCollector
    from schemas.jobs import JobInfo
    from streams.decide.policy_config import PolicyFile

    aps = '{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 1}}'
    job = {"job_id": 9, "job_state": "RUNNING", "nodes": "gpu-01", "partition": "gpu", "comment": aps}
    answers = iter([_squeue(job), _squeue(job), _squeue({**job, "partition": "big"}), _squeue()])

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        out = next(answers) if argv[0] == "squeue" else codec.dumps({"errors": [], "nodes": []}).decode()
        return subprocess.CompletedProcess(argv, 0, out, "")

    produced: list[tuple[str, bytes]] = []

    class Sink:
        def produce(self, topic: str, value: bytes, key: bytes | None = None) -> None:
            produced.append((topic, value))

    col = SlurmCollector(
        Sink(),
        "raw",
        run,
        controller_host="ctl",
        use_sacct=False,
        clock=lambda: NOW,
        jobs_topic="jobs",
        cluster="c1",
    )
    for _ in range(4):
        col.poll_once()
    infos = [JobInfo.model_validate_json(v) for t, v in produced if t == "jobs"]
    assert [(i.job_id, i.partition, i.cluster) for i in infos] == [("9", "gpu", "c1"), ("9", "big", "c1")]
    policy, notes = PolicyFile().resolve("c1", infos[0].partition, infos[0])
    assert (policy.max_requeue_times, notes) == (1, [])  # the decide step reads the comment as NVIDIA's does
