"""Every error the CUDA runtime can report, in the words it reports them, read against the catalog.

``tests/fixtures/cuda/cudart_12_9_errors.tsv`` is what ``cudaGetErrorName`` and ``cudaGetErrorString``
of libcudart 12.9 return for each code (asked through ctypes; no GPU is needed for that). Before
this audit, messages that start with a capital (``CUDA driver is a stub library``, the MPS client's
errors, ``PTX JIT compiler library not found``) fell through to the generic Python-exception
catch-all, the teardown errors of a dying process (``driver shutting down``) were read as the
program's root, and a program that prints the error's *name* (the CUDA samples' ``checkCudaErrors``,
CuPy) gave no verdict at all for most names.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.extract.rules import load_catalog
from tests.diagnose.logs import verdict

TABLE = Path(__file__).parents[1] / "fixtures" / "cuda" / "cudart_12_9_errors.tsv"


def _errors() -> list[tuple[int, str, str]]:
    rows = []
    for line in TABLE.read_text().splitlines():
        if line and not line.startswith("#"):
            code, name, message = line.split("\t")
            rows.append((int(code), name, message))
    return rows


ERRORS = _errors()
BY_NAME = {name: (code, message) for code, name, message in ERRORS}


def _samples_line(code: int, name: str) -> str:
    """The CUDA samples' ``checkCudaErrors`` (helper_cuda.h): code and name, no message."""
    return f'CUDA error at train.cu:42 code={code}({name}) "cudaDeviceSynchronize()"'


def test_the_table_is_the_runtimes_whole_list():
    assert len(ERRORS) == 132
    assert BY_NAME["cudaErrorIllegalAddress"] == (700, "an illegal memory access was encountered")
    assert BY_NAME["cudaErrorUnknown"][0] == 999


@pytest.mark.parametrize(("code", "name", "message"), ERRORS, ids=[name for _, name, _ in ERRORS])
def test_every_runtime_message_reads_as_a_cuda_error_in_pytorchs_words(tmp_path, code, name, message):
    rule, *_ = verdict(tmp_path, [f"RuntimeError: CUDA error: {message}"])
    assert isinstance(rule, str) and rule.startswith("cuda."), (code, name, rule)


def test_every_name_the_catalog_reads_gives_the_verdict_of_its_message(tmp_path):
    known = set(load_catalog().lookups["cuda_runtime_error"])
    read = 0
    for code, name, message in ERRORS:
        by_name = verdict(tmp_path, [_samples_line(code, name)])
        if by_name[0] is None:
            assert name.removeprefix("cudaError") not in known, name
            continue
        read += 1
        by_message = verdict(tmp_path, [f"RuntimeError: CUDA error: {message}"])
        assert by_name[1:] == by_message[1:], (name, by_name, by_message)
    assert read >= len(known) + 10  # the table's names and those the specific rules read by name


def test_pytorchs_pointer_to_the_docs_is_not_a_second_signal_for_one_error(tmp_path):
    pointer = (
        "Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
        "group__CUDART__TYPES.html for more information."
    )
    rule, *_ = verdict(tmp_path, [pointer])
    assert rule is None


@pytest.mark.parametrize(
    "teardown",
    [
        "[W CUDAGuardImpl.h:118] Warning: CUDA warning: driver shutting down (function destroyEvent)",
        "gpu-04:2231:2290 [3] NCCL WARN Cuda failure 4 'driver shutting down'",
        "terminate called after throwing an instance of 'c10::Error' what():  CUDA error: context is destroyed",
    ],
)
def test_a_dying_processs_cuda_teardown_yields_to_what_killed_it(tmp_path, teardown):
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
        "of 79.10 GiB of which 1.06 GiB is free."
    )
    assert verdict(tmp_path, [teardown, oom])[:3] == ("cuda.out_of_memory", "application", False)
    assert verdict(tmp_path, [oom, teardown])[:3] == ("cuda.out_of_memory", "application", False)


@pytest.mark.parametrize(
    ("name", "rule", "category", "restartable"),
    [
        ("cudaErrorStubLibrary", "cuda.stub_driver", "system_software", False),
        ("cudaErrorJitCompilerNotFound", "cuda.ptx_jit_missing", "system_software", False),
        ("cudaErrorMpsConnectionFailed", "cuda.mps_failure", "infrastructure", True),
        ("cudaErrorMpsClientTerminated", "cuda.mps_failure", "infrastructure", True),
        ("cudaErrorDeviceNotLicensed", "cuda.vgpu_unlicensed", "infrastructure", False),
        ("cudaErrorPeerAccessUnsupported", "cuda.peer_access_unsupported", "infrastructure", False),
    ],
)
def test_the_nodes_cuda_setup_is_not_read_as_the_programs_fault(tmp_path, name, rule, category, restartable):
    code, message = BY_NAME[name]
    for line in (
        f"RuntimeError: CUDA error: {message}",
        f"gpu-02:811:870 [0] NCCL WARN Cuda failure {code} '{message}'",
        _samples_line(code, name),
    ):
        assert verdict(tmp_path, [line])[:3] == (rule, category, restartable), line


def test_nccls_own_peer_refusal_keeps_its_rule_and_device(tmp_path):
    line = (
        "gpu-05:311:390 [1] transport/p2p.cc:270 NCCL WARN failed to peer with device 1(=1b000): 217 peer "
        "access is not supported between these two devices"
    )
    assert verdict(tmp_path, [line])[:3] == ("nccl.peer_access_unsupported", "infrastructure", False)


def test_a_library_status_after_the_cuda_error_prefix_is_not_a_runtime_message(tmp_path):
    line = "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, ...)`"
    assert verdict(tmp_path, [line])[0] != "cuda.error"


def test_cupy_names_the_error_before_its_message(tmp_path):
    line = "cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access was encountered"
    assert verdict(tmp_path, [line])[:3] == ("cuda.runtime_api_error", "application", True)
