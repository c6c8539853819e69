"""``repeat_quiet_s``: the streaming extract stage sends a quiet rule's fact once per job and node."""

from __future__ import annotations

from datetime import timedelta

from schemas.base import utcnow
from streams.extract.extractor import Extractor
from streams.extract.quiet import RepeatQuieter
from streams.extract.record import extract_record
from tests.factories import T0, kernel_xid

EX = Extractor()
PLUGIN = "{host}:3007979:3008042 [{dev}] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin."


def plugin_record(host: str, dev: int, job: str, at_s: float = 0.0) -> bytes:
    """A Vector record from job ``job``'s output file (the file name names the job)."""
    from schemas import codec

    ts = (T0 + timedelta(seconds=at_s)).isoformat().replace("+00:00", "Z")
    return codec.dumps(
        {
            "message": PLUGIN.format(host=host, dev=dev),
            "file": f"/var/log/slurm/slurm-{job}.out",
            "host": host,
            "timestamp": ts,
            "source_type": "file",
        }
    )


def sent(records: list[bytes], quieter: RepeatQuieter | None) -> list[tuple[str, str | None, str | None]]:
    out = []
    for offset, value in enumerate(records):
        for o in extract_record(EX, value, None, "raw.logs", 0, offset, utcnow(), quieter):
            out.append((o.value.rule, o.value.job_id, o.value.node))  # type: ignore[attr-defined]
    return out


def test_every_rank_of_a_node_saying_the_same_notice_is_sent_once():
    q = RepeatQuieter(EX.catalog)
    got = sent([plugin_record("gpu-01", dev, "77") for dev in range(8)], q)
    assert got == [("nccl.net_plugin_missing", "77", "gpu-01")]
    assert q.dropped == 7


def test_other_nodes_other_jobs_and_a_later_init_are_each_sent():
    q = RepeatQuieter(EX.catalog)
    records = [
        plugin_record("gpu-01", 0, "77"),
        plugin_record("gpu-02", 0, "77"),  # another node
        plugin_record("gpu-01", 0, "78"),  # another job
        plugin_record("gpu-01", 1, "77", at_s=601),  # after the quiet period: a new init
    ]
    assert len(sent(records, q)) == 4


def test_without_a_quieter_every_copy_is_sent_and_rules_not_marked_quiet_are_never_dropped():
    copies = [plugin_record("gpu-01", dev, "77") for dev in range(3)]
    assert len(sent(copies, None)) == 3
    q = RepeatQuieter(EX.catalog)
    xids = [kernel_xid("gpu-03", 79, T0) for _ in range(3)]
    assert len(sent(xids, q)) == 3 and q.dropped == 0


def test_the_memory_is_bounded_and_forgets_the_oldest_key_first():
    q = RepeatQuieter(EX.catalog, max_keys=2)
    sent([plugin_record(h, 0, "77") for h in ("gpu-01", "gpu-02", "gpu-03")], q)
    # gpu-01 was forgotten: its next copy is sent again (one extra copy, never a missing fact)
    assert len(sent([plugin_record("gpu-01", 1, "77"), plugin_record("gpu-03", 1, "77")], q)) == 1
