"""History and company change what some codes mean (failure-signatures.md §2.5)."""

from __future__ import annotations

from datetime import timedelta

from schemas.incidents import Category
from streams.correlate.attribution import attribute
from streams.correlate.correlator import window_from
from tests.factories import T0, cuda_error, job_output, kernel_xid, nccl_timeout, one, verdict

XID13 = "Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address"


def test_a_sympathetic_xid45_steps_aside_for_the_fault_it_follows():
    v = verdict(
        kernel_xid("gpu-02", 45, T0, text="pid=1, Ch 00000010"),
        kernel_xid("gpu-02", 48, T0 + timedelta(seconds=1), text="An uncorrectable double bit error"),
    )
    assert v.root.attrs["code"] == 48
    assert any(s.rule == "gpu.xid" for s in v.supporting)


def test_xid13_once_is_the_application():
    v = verdict(kernel_xid("gpu-02", 13, T0, text=XID13))
    assert v.category == Category.APPLICATION
    assert v.isolate == []


def test_xid13_repeating_on_one_gpu_is_that_gpu():
    v = verdict(*(kernel_xid("gpu-02", 13, T0 + timedelta(seconds=i), text=XID13) for i in range(3)))
    assert v.category == Category.HARDWARE_GPU
    assert v.isolate == ["gpu-02:0000:06:00"]
    assert "repeated on this GPU" in v.root.summary


def test_xid13_on_different_gpus_stays_the_application():
    v = verdict(*(kernel_xid(f"gpu-0{i}", 13, T0 + timedelta(seconds=i), text=XID13) for i in range(1, 4)))
    assert v.category == Category.APPLICATION


def test_a_decisive_hardware_fault_beats_an_earlier_application_error():
    v = verdict(cuda_error("gpu-01", "7", T0), kernel_xid("gpu-03", 79, T0 + timedelta(seconds=5)))
    assert (v.category, v.culprit.node) == (Category.HARDWARE_GPU, "gpu-03")


def test_only_cascades_give_an_unknown_verdict_with_no_culprit():
    v = verdict(nccl_timeout("gpu-01", 0, "7", T0), nccl_timeout("gpu-02", 1, "7", T0))
    assert (v.category, v.culprit, v.isolate) == (Category.UNKNOWN, None, [])
    assert v.supporting[0].count == 2


def test_xid48_beside_a_row_remap_failure_says_to_replace_the_gpu():
    v = verdict(
        kernel_xid("gpu-02", 48, T0, text="An uncorrectable double bit error (DBE)"),
        kernel_xid("gpu-02", 64, T0 + timedelta(seconds=1), text="Row Remapper Error"),
    )
    assert v.root.attrs["code"] == 48
    assert "row remapping failed: replace the GPU" in v.root.summary


def test_among_lines_of_one_timestamp_the_timeout_leads_whatever_the_ids_say():
    """The watchdog timeout and the lines it causes share a time stamp; in ``sickbay diagnose`` a
    signal id hashes the file's path, so it must not decide which of them leads."""
    at = T0 + timedelta(minutes=10)
    gone = job_output(
        "gpu-01",
        "7",
        at,
        "[rank0]:[E1129 03:10:00.4 ProcessGroupNCCL.cpp:1595] Some NCCL "
        "operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
        "subsequent GPU operations might run on corrupted/incomplete data.",
    )
    for first, second in (("a", "z"), ("z", "a")):
        signals = [
            one(nccl_timeout("gpu-01", 0, "7", at), offset=1).model_copy(
                update={"job_id": "7", "signal_id": first * 20}
            ),
            one(gone, offset=2).model_copy(update={"job_id": "7", "signal_id": second * 20}),
        ]
        window = window_from(signals, cluster="c", job_id="7", now=T0)
        assert window is not None
        v = attribute(window, None)
        assert v is not None and v.root.rule == "nccl.watchdog_timeout"


def test_a_root_standing_in_from_a_tally_is_listed_once_in_the_evidence():
    v = verdict(nccl_timeout("gpu-01", 0, "7", T0))
    assert [e.signal_id for e in v.evidence] == [v.root.signal_id]
    v = verdict(kernel_xid("gpu-03", 79, T0), nccl_timeout("gpu-01", 0, "7", T0 + timedelta(seconds=5)))
    ids = [e.signal_id for e in v.evidence]
    assert ids[0] == v.root.signal_id and len(ids) == len(set(ids)) == 2


def _recovery(node: str, at_s: int, to: str) -> bytes:
    return kernel_xid(
        node, 154, T0 + timedelta(seconds=at_s), text=f"GPU recovery action changed from 0x0 (None) to {to}"
    )


def test_an_xid154_beside_a_fault_sets_how_much_is_isolated():
    v = verdict(kernel_xid("gpu-02", 79, T0), _recovery("gpu-02", 1, "0x2 (Node Reboot Required)"))
    assert (v.root.attrs["code"], v.category) == (79, Category.HARDWARE_GPU)
    assert v.isolate == ["gpu-02"]


def test_a_lone_xid154_still_asking_for_a_reset_is_the_root_on_that_gpu():
    v = verdict(_recovery("gpu-02", 0, "0x1 (GPU Reset Required)"))
    assert (v.root.attrs["code"], v.category) == (154, Category.HARDWARE_GPU)
    assert v.isolate == ["gpu-02:0000:06:00"]
    assert "no other fault logged" in v.root.summary


def test_a_lone_xid154_whose_latest_action_is_none_attributes_nothing():
    raws = [
        _recovery("gpu-02", 0, "0x1 (GPU Reset Required)"),
        kernel_xid(
            "gpu-02",
            154,
            T0 + timedelta(seconds=60),
            text="GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)",
        ),
    ]
    sigs = [one(r, offset=i).model_copy(update={"job_id": "7"}) for i, r in enumerate(raws)]
    window = window_from(sigs, cluster="c", job_id="7", now=T0)
    assert window is not None and attribute(window, None) is None
