"""A job that hung while exiting: in a finished log, teardown rather than training.

When a program ends without ``destroy_process_group()``, PyTorch's ProcessGroupNCCL destructor warns
at interpreter exit ("destroy_process_group() was not called before program exit"), and the NCCL
communicators are torn down by whichever thread gets there first. With many process groups (MoE
expert and optimizer groups) that teardown can deadlock: the watchdog then "got stuck" and the
heartbeat monitor aborts the rank minutes after training ended (modelscope/ms-swift#7992, fixed by
an explicit ``destroy_process_group()``).

Attribution alone reads such a log as a hang of unknown cause: the watchdog's hang is a cascade and
nothing else failed. This reading names it when the log says so and nothing contradicts it: no root
candidate at all, no collective that timed out (ranks waiting on a rank that left mid-training time
out in a collective instead), and the exit warning printed before the first watchdog hang. The
warning is then the root: the program's teardown, and a rerun hangs the same way at its end.
``sickbay diagnose`` only; the stream never opens a window on a hint.
"""

from __future__ import annotations

from schemas.signals import Role, Signal
from streams.correlate.progress import NCCL_TIMEOUT_RULES

EXIT_WARNING_RULE = "framework.exit_without_destroy_process_group"
WATCHDOG_HANG_RULE = "nccl.watchdog_hang"
# the collective timeouts the hang detector also counts; the watchdog thread's termination is left
# out, since it carries any exception the watchdog met (a CUDA or HIP error too), not only a timeout
COLLECTIVE_TIMEOUT_RULES = frozenset(NCCL_TIMEOUT_RULES) - {"nccl.watchdog_terminated"}
WEIGHT = 35  # a catch-all's: any specific root would have spoken first anyway


def read_teardown_hang(signals: list[Signal]) -> list[Signal]:
    """``signals`` with the first exit warning made the root when the only failure is a watchdog
    that got stuck after ranks had begun to exit."""
    if any(s.role == Role.ROOT_CANDIDATE for s in signals):
        return signals
    if any(s.rule in COLLECTIVE_TIMEOUT_RULES for s in signals):
        return signals
    hangs = [s.event_time for s in signals if s.rule == WATCHDOG_HANG_RULE]
    exits = [s for s in signals if s.rule == EXIT_WARNING_RULE]
    if not hangs or not exits:
        return signals
    first_exit = min(exits, key=lambda s: s.event_time)
    if first_exit.event_time >= min(hangs):
        return signals
    root = first_exit.model_copy(
        update={
            "role": Role.ROOT_CANDIDATE,
            "weight": WEIGHT,
            "summary": "the job hung while exiting: ranks left without destroy_process_group() and the "
            "NCCL watchdog got stuck tearing down",
        }
    )
    return [root if s is first_exit else s for s in signals]
