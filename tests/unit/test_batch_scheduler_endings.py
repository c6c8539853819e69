"""Verdicts on the endings PBS and LSF write into a job's output, read the way Slurm's banners are:
the wall clock is the scheduler's (a restart from the last checkpoint), memory is the job's size,
the owner's kill is deliberate. Each rule's examples sit beside it in the catalog."""

from __future__ import annotations

from schemas.incidents import Category
from tests.factories import outcome, output_verdict

WATCHDOG = (
    "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600123 milliseconds before timing out."
)


def test_pbs_killing_a_job_at_its_walltime_is_the_scheduler_and_worth_a_restart():
    v = output_verdict("=>> PBS: job killed: walltime 86412 exceeded limit 86400")
    assert outcome(v) == ("scheduler.pbs_limit_exceeded", Category.INFRASTRUCTURE, True)
    assert v.isolate == []


def test_pbs_killing_a_job_over_its_memory_is_the_job_s_size():
    killed = "=>> PBS: job killed: mem job total 4323312 kb exceeded limit 3145728 kb"
    assert outcome(output_verdict(killed)) == ("scheduler.pbs_limit_exceeded", Category.APPLICATION, False)


def test_lsf_s_run_limit_explains_the_timeouts_it_caused():
    v = output_verdict(WATCHDOG, "TERM_RUNLIMIT: job killed after reaching LSF run time limit.")
    assert outcome(v) == ("scheduler.lsf_term", Category.INFRASTRUCTURE, True)


def test_lsf_s_memory_limit_wins_over_the_exit_code_it_reports():
    v = output_verdict(
        "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.", "Exited with exit code 137."
    )
    assert outcome(v) == ("scheduler.lsf_term", Category.APPLICATION, False)


def test_the_owner_killing_an_lsf_job_is_deliberate_and_not_restarted():
    assert outcome(output_verdict("TERM_OWNER: job killed by owner.")) == (
        "scheduler.lsf_term",
        Category.UNKNOWN,
        False,
    )
