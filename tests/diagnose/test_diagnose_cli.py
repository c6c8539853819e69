from __future__ import annotations

import bz2
import gzip
import lzma
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from schemas import codec
from streams.settings import REPO_ROOT

KEYS = {
    "category",
    "restartable",
    "isolate",
    "culprit",
    "root_cause",
    "supporting",
    "evidence",
    "confidence",
    "coverage",
}
XID79 = "[ 5321.108101] NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus."
TIMEOUT = (
    "[rank1]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600081 "
    "milliseconds before timing out."
)


_GZ = gzip.compress((XID79 + "\n" + "".join(f"step {i} loss {i * 7 % 13}\n" for i in range(20000))).encode())
TRUNCATED_GZ = _GZ[: len(_GZ) * 2 // 3]


def diagnose(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "streams.cli.main", "diagnose", *args],
        input=stdin,
        capture_output=True,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )


def as_json(proc: subprocess.CompletedProcess[bytes]) -> dict:
    assert proc.returncode == 0, proc.stderr.decode()
    out = codec.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert set(out) == KEYS
    return out


def test_json_verdict_names_the_node_root_line_and_cascade(tmp_path: Path):
    node = tmp_path / "logs" / "gpu-03"
    node.mkdir(parents=True)
    (node / "kern.log").write_text(f"Nov 29 03:00:00 gpu-03 kernel: {XID79}\n")
    (tmp_path / "logs" / "slurm-42.out").write_text(f"iteration 10 | loss 2.0\n{TIMEOUT}\n")
    out = as_json(diagnose("--format", "json", str(tmp_path / "logs")))
    assert out["category"] == "hardware_gpu"
    assert out["culprit"] == "gpu-03 GPU 0000:06:00"
    assert out["isolate"] == ["gpu-03"]
    assert out["restartable"] is True
    assert out["root_cause"]["rule"] == "gpu.xid"
    assert out["root_cause"]["line"] == 1
    assert out["root_cause"]["source"].endswith("gpu-03/kern.log")
    assert [s["rule"] for s in out["supporting"]] == ["nccl.watchdog_timeout"]
    assert set(out["coverage"]) == {"kernel", "training"}
    assert 0.0 < out["confidence"] <= 1.0


def test_stdin_gzip_and_shipper_json_lines_are_read(tmp_path: Path):
    record = codec.dumps({"log": XID79, "hostname": "gpu-07", "@timestamp": 1764417600.0})
    gz = gzip.compress(record + b"\n")
    out = as_json(diagnose("--format", "json", "-", stdin=gz))
    assert out["culprit"] == "gpu-07 GPU 0000:06:00"


def test_text_output_leads_with_the_category_and_names_the_culprit(tmp_path: Path):
    log = tmp_path / "kern.log"
    log.write_text(f"Nov 29 03:00:00 gpu-03 kernel: {XID79}\n")
    proc = diagnose(str(log))
    assert proc.returncode == 0
    text = proc.stdout.decode()
    assert text.startswith("HARDWARE_GPU")
    assert "culprit     gpu-03 GPU 0000:06:00" in text


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x00\x01\x02\xff" * 1000,
        b"valid line\n" + b"x" * (2 << 20) + b"\n" + XID79.encode() + b"\n",
        b"bad utf8 \xff\xfe here\n" + XID79.encode() + b"\n",
        TRUNCATED_GZ,
    ],
    ids=["empty", "binary", "over-long-line", "invalid-utf8", "truncated-gzip"],
)
def test_bad_input_is_reported_never_a_crash(tmp_path: Path, content: bytes):
    log = tmp_path / "input.log"
    log.write_bytes(content)
    proc = diagnose("--format", "json", str(log))
    out = as_json(proc)
    if b"x" * 100 in content:  # the JSON form says what it left out too, on stderr
        assert b"warning: skipped 1 lines over 1 MiB" in proc.stderr
    if XID79.encode() in content or content.startswith(b"\x1f\x8b"):
        assert out["root_cause"]["rule"] == "gpu.xid"
    else:
        assert out["category"] == "unknown"
        assert out["root_cause"] is None
    text = diagnose(str(log))
    assert text.returncode == 0
    if content.startswith(b"\x1f\x8b"):
        assert b"truncated gzip stream" in text.stdout
    if b"x" * 100 in content:
        assert b"1 lines over 1 MiB" in text.stdout


_LOG = (XID79 + "\n" + "".join(f"step {i} loss {i * 7 % 13}\n" for i in range(20000))).encode()


@pytest.mark.parametrize(
    "compress",
    [bz2.compress, lzma.compress, lambda data: zstandard.ZstdCompressor().compress(data)],
    ids=["bzip2", "xz", "zstd"],
)
def test_rotated_logs_compressed_by_bzip2_xz_or_zstd_are_read_like_plain_ones(tmp_path: Path, compress):
    log = tmp_path / "kern.log.1"
    log.write_bytes(
        compress(_LOG) + compress(b"more\n")
    )  # two members (frames), as pbzip2, pixz, pzstd write
    proc = diagnose("--format", "json", str(log))
    out = as_json(proc)
    assert (out["root_cause"]["rule"], out["evidence"][0]["line"]) == ("gpu.xid", 1)
    assert proc.stderr == b""


def test_a_truncated_xz_stream_yields_what_came_before_the_damage_and_says_so(tmp_path: Path):
    xz = lzma.compress(_LOG)
    log = tmp_path / "kern.log.xz"
    log.write_bytes(xz[: len(xz) * 2 // 3])
    proc = diagnose("--format", "json", str(log))
    assert as_json(proc)["root_cause"]["rule"] == "gpu.xid"
    assert b"warning: " in proc.stderr and b"truncated xz stream" in proc.stderr


def test_a_damaged_zstd_file_is_never_read_as_nothing_in_silence(tmp_path: Path):
    log = tmp_path / "kern.log.zst"
    log.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00\x58\x61\x00" * 64)  # zstd's magic, then no valid frame
    proc = diagnose("--format", "json", str(log))
    assert as_json(proc)["category"] == "unknown"
    assert b"corrupt zstd data" in proc.stderr or b"truncated zstd stream" in proc.stderr


def test_a_missing_path_is_a_clear_error():
    proc = diagnose("/nonexistent/logs")
    assert proc.returncode == 2
    assert b"no such file or folder" in proc.stderr


def test_diagnose_on_the_demos_injected_logs_names_the_demo_node(tmp_path: Path):
    from datetime import UTC, datetime

    from streams.cli.demo import FAULT_NODE, JUNK, fault_records

    xid, timeouts = fault_records(
        "42", {"gpu-01": 0, "gpu-02": 1, "gpu-03": 2, "gpu-04": 3}, datetime.now(UTC)
    )
    faults = tmp_path / "faults.jsonl"
    faults.write_bytes(b"\n".join([JUNK, xid, *timeouts]) + b"\n")
    out = as_json(diagnose("--format", "json", str(faults)))
    assert out["category"] == "hardware_gpu"
    assert out["culprit"].startswith(f"{FAULT_NODE} ")
    assert out["supporting"][0]["count"] == 3


def test_a_node_local_log_collected_per_host_names_the_host_when_its_lines_do_not(tmp_path: Path):
    node_dir = tmp_path / "nodes" / "dgx-a100-017"
    node_dir.mkdir(parents=True)
    (node_dir / "kern.log").write_text(XID79 + "\n")  # dmesg form: no host in the line
    out = as_json(diagnose("--format", "json", str(tmp_path)))
    assert out["culprit"] == "dgx-a100-017 GPU 0000:06:00"
    assert out["isolate"] == ["dgx-a100-017"]


def test_host_from_path_only_reads_node_local_logs():
    from streams.diagnose.driver import host_from_path

    assert host_from_path("/data/incident/gpu-0042/kern.log") == "gpu-0042"
    assert host_from_path("/data/gpu-0042/var/log/messages") == "gpu-0042"
    assert host_from_path("/data/gpu-0042/train.log") is None
    assert host_from_path("/var/log/kern.log") is None
    assert host_from_path("/home/alice/kern.log") is None
    assert host_from_path("/tmp/run_3/kern.log") is None
