"""A log with no root and no cascade: a *lead* hint stands in at the lowest confidence, in the
finished-log driver only (``sickbay diagnose``); the stream never opens a window on a hint."""

from __future__ import annotations

from datetime import timedelta

from schemas.incidents import Category
from streams.correlate.attribution import Verdict, attribute
from streams.correlate.correlator import add_signal, window_from
from tests.factories import T0, job_output, nccl_timeout, one, signals

HOST_RAM = (
    "[2023-04-20 19:03:19,581] [INFO] [utils.py:840:see_memory_usage] CPU Virtual Memory:  "
    "used = 29.71 GB, percent = 95.3%"
)
DIMM_CE = (
    "[21584690.529877] EDAC MC0: 4 CE error on CPU#0Channel#2_DIMM#0 "
    "(channel:2 slot:0 page:0x0 offset:0x0 grain:8 syndrome:0x0)"
)
THROTTLED = "[ 9123.4] CPU3: Core temperature above threshold, cpu clock throttled (total events = 1)"


def _signals(*lines: str, timeout: bool = False):
    out = [
        one(job_output("gpu-01", "7", T0 + timedelta(seconds=i), line), offset=i).model_copy(
            update={"job_id": "7"}
        )
        for i, line in enumerate(lines)
    ]
    if timeout:
        out.append(one(nccl_timeout("gpu-02", 1, "7", T0 + timedelta(seconds=9)), offset=99))
    return out


def _verdict(*lines: str) -> Verdict:
    window = window_from(_signals(*lines), cluster="c", job_id="7", now=T0)
    assert window is not None
    v = attribute(window, None)
    assert v is not None
    return v


def test_host_ram_nearly_full_alone_is_an_application_lead_with_nothing_isolated():
    window = window_from(_signals(HOST_RAM), cluster="c", job_id="7", now=T0)
    assert window is not None
    v = attribute(window, None)
    assert v is not None
    assert (v.root.rule, v.category, v.restartable) == (
        "framework.host_memory_high",
        Category.APPLICATION,
        False,
    )
    assert v.isolate == []
    assert v.confidence == 0.2  # below a cascade standing in (0.3) and any root


def test_corrected_dimm_errors_alone_point_at_the_host_without_draining_it():
    window = window_from(_signals(DIMM_CE), cluster="c", job_id="7", now=T0)
    assert window is not None
    v = attribute(window, None)
    assert v is not None
    assert (v.category, v.isolate, v.restartable) == (Category.HARDWARE_HOST, [], True)


def test_a_cascade_beats_a_lead_and_keeps_the_verdict_unknown():
    window = window_from(_signals(HOST_RAM, timeout=True), cluster="c", job_id="7", now=T0)
    assert window is not None
    v = attribute(window, None)
    assert v is not None
    assert (v.root.rule, v.category) == ("nccl.watchdog_timeout", Category.UNKNOWN)


def test_a_hint_that_is_no_lead_opens_nothing():
    sigs = _signals(THROTTLED)
    assert [s.role.value for s in sigs] == ["hint"] and sigs[0].context is None
    assert window_from(sigs, cluster="c", job_id="7", now=T0) is None


def test_the_stream_opens_no_window_on_a_lead():
    (lead,) = _signals(HOST_RAM)
    assert add_signal(None, None, lead, "c", T0) is None


def test_a_missing_nccl_net_plugin_is_no_lead_because_healthy_clusters_print_it():
    line = "HGX-H100-11:18226:18274 [5] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin."
    sigs = _signals(line)
    assert sigs[0].rule == "nccl.net_plugin_missing"
    assert window_from(sigs, cluster="c", job_id="7", now=T0) is None


def test_a_store_nobody_can_reach_is_an_infrastructure_lead_and_a_refused_one_is_nothing():
    unreachable = (
        "[W socket.cpp:663] [c10d] The client socket has failed to connect to "
        "[::ffff:255.255.0.0]:29500 (errno: 110 - Connection timed out)."
    )
    v = _verdict(unreachable)
    assert (v.root.rule, v.category, v.restartable, v.isolate) == (
        "infra.store_unreachable",
        Category.INFRASTRUCTURE,
        False,
        [],
    )
    refused = unreachable.replace("110 - Connection timed out", "111 - Connection refused")
    assert signals(job_output("gpu-01", "7", T0, refused), offset=0) == []  # the usual wait for rank 0


TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "train.py", line 88, in <module>',
    '  File "train.py", line 42, in step',
]


def test_a_traceback_cut_before_its_exception_line_is_an_application_lead():
    v = _verdict(*TRACEBACK)
    assert (v.root.rule, v.category, v.restartable, v.isolate) == (
        "framework.python_traceback",
        Category.APPLICATION,
        False,
        [],
    )
    assert v.confidence == 0.2


def test_the_exception_line_is_the_root_and_the_frames_come_last_in_the_evidence():
    # frames first in the log, then the root, then another candidate: the frames are listed after it
    lines = [
        *TRACEBACK,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "ValueError: the collator saw an empty batch",
    ]
    v = _verdict(*lines)
    assert v.root.rule == "cuda.out_of_memory"
    assert [e.rule for e in v.evidence] == [
        "cuda.out_of_memory",
        "framework.exception",
        "framework.python_traceback",
        "framework.python_traceback",
    ]
