"""Lines as the tools that carry them hand them over (``streams/extract/carriers.py``): coloured by
a logger that saw a terminal, prefixed by ``kubectl logs --timestamps``, ``docker compose logs``,
Ray, ``srun --label`` or ``pdsh``. Every rule reads them as it reads the line its program wrote."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schemas.raw import LogLine
from streams.extract.carriers import clean_chunk, strip_colours, uncarried
from streams.extract.extractor import Extractor
from streams.extract.normalize import vet_without_lines
from streams.extract.record import extract_record, sends_nothing
from streams.extract.rules import load_catalog

CATALOG = load_catalog()
EX = Extractor(CATALOG)
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

CARRIERS = {
    "kubectl --timestamps": "2024-05-01T10:00:01.123456789Z ",
    "docker compose": "trainer-1  | ",
    "kubectl --prefix": "[pod/trainer-worker-0/pytorch] ",
    "ray worker": "(RayTrainWorker pid=2041, ip=10.0.0.3) ",
    "srun --label": "3: ",
    "pdsh": "gpu17: ",
    "kubectl + pdsh": "2024-05-01T10:00:01Z node-0042: ",
}


def _signals(text: str) -> dict[str, dict[str, object]]:
    """rule -> the fields it read, without the task number that srun's label adds on purpose
    (``srun_task``; ``task`` where a rule reads the label itself)."""
    out: dict[str, dict[str, object]] = {}
    for s in EX.extract(LogLine(text=text, adapter="plain"), NOW):
        out[s.rule] = {k: v for k, v in s.attrs.items() if k not in ("srun_task", "task")}
    return out


POSITIVES = [
    pytest.param(rule.id, example.line, id=f"{rule.id}#{i}")
    for rule in CATALOG.rules
    for i, example in enumerate(rule.examples)
    if example.match and rule.id in _signals(example.line)
]


@pytest.mark.parametrize(("rule_id", "line"), POSITIVES)
def test_every_rule_reads_its_examples_behind_any_carrier_prefix_and_in_colour(rule_id: str, line: str):
    plain = _signals(line)[rule_id]
    for name, prefix in CARRIERS.items():
        got = _signals(prefix + line)
        assert rule_id in got, f"{name}: {prefix + line!r}"
        assert got[rule_id] == plain, name
    coloured = _signals(f"\x1b[1;31m{line}\x1b[0m")
    assert coloured.get(rule_id) == plain


@pytest.mark.parametrize(
    ("text", "rest", "host"),
    [
        ("2024-05-01T10:00:01.123456789Z   exitcode  : 1 (pid: 42)", "  exitcode  : 1 (pid: 42)", None),
        ("2024-05-01T10:00:01+02:00 x", "x", None),
        ("web_1    | x", "x", None),
        ("(pid=77) x", "x", None),
        ("(RayTrainWorker pid=2041, ip=10.0.0.3) x", "x", None),
        ("12: x", "x", None),
        ("gpu17: [Sat Feb 13 22:40:04 2021] NVRM: Xid", "[Sat Feb 13 22:40:04 2021] NVRM: Xid", "gpu17"),
        ("HGX-H100-11: x", "x", "HGX-H100-11"),
        (
            "worker-1: [rank3]: RuntimeError: x",
            "[rank3]: RuntimeError: x",
            "worker-1",
        ),  # DeepSpeed's pdsh launcher
        ("dgx01.cluster.local: x", "x", "dgx01.cluster.local"),
        ("2024-05-01T10:00:01Z c016: x", "x", "c016"),
    ],
)
def test_a_carrier_prefix_comes_off_and_pdsh_names_the_node(text: str, rest: str, host: str | None):
    carried = uncarried(text)
    assert carried is not None
    assert (carried.text, carried.host) == (rest, host)
    assert text[carried.offset :] == rest


@pytest.mark.parametrize(
    "text",
    [
        "RuntimeError: CUDA error: an illegal memory access was encountered",  # no digit: no node
        "rank3: loss 2.1",
        "GPU0: NVIDIA H100 80GB HBM3",
        "epoch12: done",
        "Warning3: x",
        "sm_80: unsupported architecture",  # not a DNS name
        "local_rank0: ready",
        "node23:12098:12141 [2] NCCL INFO Bootstrap",  # NCCL's own host:pid:tid prefix
        "  exitcode  : 1 (pid: 42)",
        "[rank0]: Traceback (most recent call last):",
        "python3: can't open file '/workspace/train.py': [Errno 2] No such file or directory",
        "enroot-aufs2ovlfs: failed to set capabilities: Operation not permitted",
        "",
    ],
)
def test_text_that_only_looks_like_a_carrier_prefix_is_left_alone(text: str):
    assert uncarried(text) is None


def test_a_word_with_a_number_behind_a_real_prefix_is_not_taken_for_a_node():
    carried = uncarried("2024-05-01T10:00:01Z rank3: loss 2.1")
    assert carried is not None
    assert (carried.text, carried.host) == ("rank3: loss 2.1", None)


def test_a_pdsh_gathered_kernel_log_names_the_node_and_keeps_the_dmesg_time():
    line = (
        "gpu17: [Sat Feb 13 22:40:04 2021] NVRM: Xid (PCI:0000:db:00): 79, pid=0, GPU has fallen off the bus."
    )
    (sig,) = EX.extract(LogLine(text=line, adapter="plain"), NOW)
    assert (sig.rule, sig.node, sig.gpu) == ("gpu.xid", "gpu17", "0000:db:00")
    assert sig.event_time == datetime(2021, 2, 13, 22, 40, 4, tzinfo=UTC)


def test_a_node_the_line_names_itself_wins_over_the_pdsh_host():
    line = "slurmctl01: [2024-05-01T10:00:00.000] error: Nodes gpu-7 not responding, setting DOWN"
    (sig,) = EX.extract(LogLine(text=line, adapter="plain"), NOW)
    assert (sig.rule, sig.node) == ("host.node_not_responding", "gpu-7")


def test_colours_come_off_the_signal_text():
    line = "\x1b[31mRuntimeError\x1b[0m: CUDA error: an illegal memory access was encountered"
    assert strip_colours(line) == "RuntimeError: CUDA error: an illegal memory access was encountered"
    (sig,) = [s for s in EX.extract(LogLine(text=line, adapter="plain"), NOW) if s.rule.startswith("cuda.")]
    assert "\x1b" not in sig.text


def test_a_colour_code_inside_a_literal_does_not_hide_the_record_from_the_stream():
    # the batched stage skips records in whose bytes no literal occurs; a colour code splits one
    value = b"torch.OutOfMemoryError: CUDA \x1b[1mout of memory\x1b[0m. Tried to allocate 2.00 GiB."
    assert b"CUDA out of memory" not in value
    assert not sends_nothing(value)
    assert not vet_without_lines(value)
    outs = extract_record(EX, value, "node-3", "raw.logs", 0, 7, NOW, literals=())
    assert [o.value.rule for o in outs if o.dest != "dlq"] == ["cuda.out_of_memory"]  # type: ignore[union-attr]


def test_a_chunk_reads_crlf_as_lf_and_without_colours_and_keeps_its_line_count():
    data = b"a\r\nb \x1b[32mok\x1b[0m\r\nbar 10%\rbar 20%\n\x1b]0;title\x07c\n"
    clean = clean_chunk(data)
    assert clean == b"a\nb ok\nbar 10%\rbar 20%\nc\n"
    assert clean.count(b"\n") == data.count(b"\n")
    assert clean_chunk(b"plain\n") == b"plain\n"
