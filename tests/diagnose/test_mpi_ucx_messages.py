"""Open MPI's, PRRTE's and UCX's own texts for a job that cannot start or loses a peer, read the way
the other runtimes' lists were: the launch's setup (slots, firewalls, memlock, mismatched builds)
is a root that a rerun meets again; UCX giving up on an endpoint follows the link or peer fault
that made it."""

from __future__ import annotations

import pytest

from tests.diagnose.logs import verdict, verdict_and_culprit

UCX = "[1712345678.123456] [gpu-node-07:41234:0]  "


@pytest.mark.parametrize(
    ("line", "rule", "category"),
    [
        (
            "There are not enough slots available in the system to satisfy the 16",
            "framework.mpi_not_enough_slots",
            "application",
        ),
        (
            "[gpu-node-07:41234] [[41234,0],1] ORTE_ERROR_LOG: Data unpack would read past end of buffer in file "
            "util/show_help.c at line 513",
            "framework.mpi_version_mismatch",
            "system_software",
        ),
        (
            "A process or daemon was unable to complete a TCP connection",
            "infra.mpi_tcp_connect_failed",
            "infrastructure",
        ),
        (
            "WARNING: Open MPI failed to TCP connect to a peer MPI process.  This",
            "infra.mpi_tcp_connect_failed",
            "infrastructure",
        ),
        (
            "The OpenFabrics (openib) BTL failed to initialize while trying to allocate some locked memory.  This",
            "infra.memlock_limit",
            "infrastructure",
        ),
        ("*** An error occurred in MPI_Init_thread", "infra.mpi_init_failed", "infrastructure"),
    ],
)
def test_a_launch_that_cannot_be_set_up_is_not_worth_a_plain_restart(tmp_path, line, rule, category):
    assert verdict(tmp_path, [line]) == (rule, category, False, [])


def test_a_rank_that_called_mpi_abort_is_named_and_yields_to_the_error_it_printed(tmp_path):
    abort = "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD"
    got = verdict_and_culprit(tmp_path, [abort])
    assert got[:3] == ("framework.mpi_abort", "application", False)
    assert "rank 3" in str(got[4])
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert verdict(tmp_path, [oom, abort])[0] == "cuda.out_of_memory"


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        (
            UCX
            + "ib_mlx5_log.c:177  UCX  ERROR Transport retry count exceeded on mlx5_0:1/IB (synd 0x15 vend 0x81 "
            "hw_synd 0/0)",
            "network.ucx_ib_retry_exceeded",
        ),
        (
            UCX
            + "rc_verbs_iface.c:66   UCX  ERROR send completion with error: transport retry counter exceeded qpn "
            "0x1234 wrid 0x5 vendor_err 0x81",
            "network.ucx_verbs_retry_exceeded",
        ),
    ],
)
def test_ucx_retries_run_out_through_its_logger_read_as_the_fatal_form_does(tmp_path, line, rule):
    """UCX prints the same retry exhaustion through its logger (timestamp, then host:pid:thread,
    then ``UCX  ERROR``) where an endpoint handles errors instead of aborting: the link of the host
    that logged it."""
    got = verdict_and_culprit(tmp_path, [line])
    assert got[:3] == (rule, "hardware_network", True)
    assert got[4] == "gpu-node-07"


def test_an_endpoint_ucx_gave_up_on_follows_the_link_fault(tmp_path):
    failed = (
        UCX
        + "ucp_ep.c:1435 UCX  ERROR ep 0x7f12: error 'Endpoint timeout' on rc_mlx5/mlx5_0:1 will not be handled "
        "since no error callback is installed"
    )
    retries = (
        UCX
        + "ib_mlx5_log.c:177  UCX  ERROR Transport retry count exceeded on mlx5_0:1/IB (synd 0x15 vend 0x81 "
        "hw_synd 0/0)"
    )
    assert verdict(tmp_path, [failed]) == ("network.ucx_endpoint_failed", "unknown", True, [])
    assert verdict(tmp_path, [failed, retries])[0] == "network.ucx_ib_retry_exceeded"
