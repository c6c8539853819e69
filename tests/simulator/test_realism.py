"""The realism guard: real formats, varied, and readable as the shippers write them."""

from __future__ import annotations

import re

from connectors.sources.simulator import SCENARIO_TYPES, Shipping, batch_plan, generate, records
from schemas import codec
from schemas.raw import FluentBitRecord, VectorRecord
from streams.extract.normalize import normalize

XID = re.compile(
    r"NVRM: Xid \(PCI:[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}(?:\.\d)?\): \d+, "
    r"(?:pid=(?:'?\d+'?|'?<unknown>'?), (?:name=\S+, )?)?\S"
)
WATCHDOG_FORMS = {
    "old": re.compile(r"^(?:\d+: )?\[E ProcessGroupNCCL\.cpp:\d+\] \[Rank \d+\] Watchdog caught"),
    "glog": re.compile(
        r"\[E\d{4} \d\d:\d\d:\d\d\.\d{9} ProcessGroupNCCL\.cpp:\d+\] \[Rank \d+\] Watchdog caught"
    ),
    "pg": re.compile(r"\[PG ID 0 PG GUID 0\(default_pg\) Rank \d+\] Watchdog caught"),
    "torchrun": re.compile(r"^\[rank\d+\]:\[E\d{4} "),
}


def _corpus(n: int = 140):
    return [generate(name, seed) for _, name, seed in batch_plan(n, 7)]


def test_lines_follow_the_documented_formats_and_vary():
    scenarios = _corpus()
    lines = [e.line for sc in scenarios for e in sc.events]
    xids = [ln for ln in lines if "NVRM: Xid" in ln]
    assert xids and all(XID.search(ln) for ln in xids), [ln for ln in xids if not XID.search(ln)][:3]
    assert any("pid='<unknown>'" in ln for ln in xids) and any("pid=<unknown>" in ln for ln in xids)
    assert any(re.search(r"pid=\d+", ln) for ln in xids) and any(
        "PCI:0000:" in ln and ".0)" in ln for ln in xids
    )
    kernel = [e.line for sc in scenarios for e in sc.events if e.kind == "kernel"]
    assert any(
        re.match(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ kernel: \[\s*\d+\.\d{6}\] ", ln) for ln in kernel
    )
    assert any(re.match(r"^\[\s*\d+\.\d{6}\] ", ln) for ln in kernel)
    assert any(
        re.match(r"^\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\] ", ln) for ln in kernel
    )
    assert any(re.search(r"\] \[ T\d+\] ", ln) for ln in kernel)
    watchdog = [ln for ln in lines if "Watchdog caught collective operation timeout" in ln]
    for form, rx in WATCHDOG_FORMS.items():
        assert any(rx.search(ln) for ln in watchdog), form
    hosts = {n for sc in scenarios for n in sc.truth.job_nodes}
    schemes = {
        "gpu": r"^gpu-\d{4}$",
        "dgx": r"^dgx-[a-z0-9]+-\d{3,}$",
        "node": r"^node\d+$",
        "ip": r"^ip-10-\d+-\d+-\d+$",
        "k8s": r"^(gke|aks)-",
    }
    for scheme, rx in schemes.items():
        assert any(re.match(rx, h) for h in hosts), scheme
    world = {len(sc.job.ranks) for sc in scenarios}
    assert len(world) >= 4


def test_slurmctld_allocation_lines_name_every_job_node():
    import hostlist

    for st in SCENARIO_TYPES:
        sc = generate(st.name, 11)
        if sc.truth.flavour != "slurm":
            continue
        alloc = [
            e.line for e in sc.events if "sched: Allocate JobId=" in e.line or "_start_job: Started" in e.line
        ]
        assert alloc, st.name
        m = re.search(r"(?:NodeList=| on )(\S+)", alloc[0])
        assert m is not None and set(hostlist.expand_hostlist(m.group(1))) <= set(sc.truth.job_nodes)


def test_every_record_is_a_shipper_shape_the_pipeline_reads():
    shapes: set[str] = set()
    for _, name, seed in batch_plan(68, 3):
        sc = generate(name, seed)
        for rec in records(sc.events, Shipping(seed)):
            if rec.kind == "telemetry":
                obj = codec.loads(rec.value)
                assert set(obj) >= {"name", "tags", "timestamp", "kind"} and (
                    "gauge" in obj or "counter" in obj
                )
                assert obj["tags"]["Hostname"] == rec.key.decode()
                shapes.add("vector-metric")
                continue
            line = normalize(rec.value, key_host=rec.key.decode())
            # every line says where it comes from, or (a pod's Kubernetes Event) which job it is about
            assert line.text and (line.host or line.job_id), rec.value[:200]
            shapes.add(line.adapter)
            if rec.value.startswith(b"{"):
                obj = codec.loads(rec.value)
                if "log" in obj:
                    FluentBitRecord.model_validate(obj)
                else:
                    VectorRecord.model_validate(obj)
    assert shapes == {"fluentbit", "vector", "plain", "vector-metric"}


def test_aidot_logger_lines_follow_the_library_layout():
    for seed in range(40):
        sc = generate("app_nan_loss", seed)
        if sc.job.framework != "aidot":
            continue
        recs = [e.line for e in sc.events if "training_telemetry_rank" in e.line and "[type=" in e.line]
        assert recs
        for line in recs:
            m = re.search(r" - training_telemetry_rank\d+ - INFO - \[(.*)\]$", line)
            assert m, line
            keys = [kv.split("=", 1)[0] for kv in re.split(r" \| (?=[\w.]+=)", m.group(1))]
            assert keys[0] == "type" and keys[-1] == "count"
        return
    raise AssertionError("no aidot job among 40 seeds")
