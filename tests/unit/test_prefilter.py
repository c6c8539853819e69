from __future__ import annotations

import gzip
import random
from datetime import UTC, datetime

import pytest

from schemas.raw import LogLine
from streams.extract import prefilter as pf_module
from streams.extract.extractor import Extractor, Position
from streams.extract.prefilter import Prefilter, available_backends, count_newlines
from streams.extract.rules import load_catalog

CATALOG = load_catalog()
BACKENDS = available_backends()
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
# Overlapping and nested literals: every occurrence must still mark its line.
TOY = ["abc", "bcd", "abcd", "b c", "xyz", "é!"]

# Lines as the logs write them (the catalog's own examples, both ways) plus everyday chatter.
REAL = [ex.line for rule in CATALOG.rules for ex in rule.examples if "\n" not in ex.line] + [
    "gpu-01:5776:5902 [0] NCCL INFO Channel 00/32 : 0 1 2 3 4 5 6 7",
    "Mar 14 10:22:31 gpu-017 systemd[1]: Started Session 4211 of User slurm.",
    "[2026-11-29T18:45:00.001] _job_complete: JobId=2 done",
    "Epoch 3:  45%|████▌     | 4500/10000 [12:34<15:21,  5.97it/s, v_num=12]",
    "",
    "   ",
]


def naive(literals: list[str], lines: list[str]) -> list[tuple[int, str, tuple[int, ...]]]:
    out = []
    for i, line in enumerate(lines):
        ids = tuple(k for k, lit in enumerate(literals) if lit in line)
        if ids:
            out.append((i, line, ids))
    return out


def random_lines(literals: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = ["foo", "bar", "é", "a", "c", "d", "x", " ", "[0]", "\t", "ü€", *REAL[:20]]
    # fragments make near misses: a literal cut short, or split by a character
    pieces = [*literals, *(lit[:-1] for lit in literals if len(lit) > 1), *(lit[1:] for lit in literals)]
    lines = []
    for _ in range(n):
        parts = [
            rng.choice(pieces) if rng.random() < 0.15 else rng.choice(words) for _ in range(rng.randrange(8))
        ]
        line = "".join(parts) if rng.random() < 0.5 else " ".join(parts)
        if rng.random() < 0.05:
            line += "\r"
        lines.append(line.replace("\n", " "))
    return lines


def found(pf: Prefilter, text: str) -> list[tuple[int, str, tuple[int, ...]]]:
    return [(h.number, h.line.decode(), h.literals) for h in pf.hits(text.encode())]


@pytest.fixture(params=[True, False], ids=["numpy", "no-numpy"])
def numpy_or_not(request, monkeypatch):
    if not request.param:
        monkeypatch.setattr(pf_module, "_np", None)
    return request.param


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(3))
def test_hits_are_exactly_the_lines_holding_a_literal(backend, seed, numpy_or_not):
    for literals in (TOY, list(Prefilter.from_catalog(CATALOG).literals)):
        pf = Prefilter(literals, backend)
        lines = random_lines(literals, 400, seed) + REAL
        random.Random(seed).shuffle(lines)
        assert found(pf, "\n".join(lines) + "\n") == naive(list(pf.literals), lines)


@pytest.mark.parametrize("backend", BACKENDS)
def test_candidate_lines_gives_the_index_and_the_line(backend):
    pf = Prefilter(["NVRM: Xid", "CUDA error: "], backend)
    text = b"boot\nNVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.\nok\r\nRuntimeError: CUDA error: x\r\n"
    assert list(pf.candidate_lines(text)) == [
        (1, b"NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus."),
        (3, b"RuntimeError: CUDA error: x\r"),
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_last_line_without_newline_and_empty_input(backend, numpy_or_not, tmp_path):
    pf = Prefilter(TOY, backend)
    assert list(pf.candidate_lines(b"")) == []
    assert list(pf.candidate_lines(b"\n\n")) == []
    assert list(pf.candidate_lines(b"abc")) == [(0, b"abc")]
    assert list(pf.candidate_lines(b"x\nyy xyz")) == [(1, b"yy xyz")]
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    scan = pf.scan_file(empty)
    assert list(scan) == []
    assert scan.lines == 0
    last = tmp_path / "last.log"
    last.write_bytes(b"one\ntwo abc\nthree xyz")
    scan = pf.scan_file(last)
    assert [(h.number, h.line) for h in scan] == [(2, b"two abc"), (3, b"three xyz")]
    assert (scan.lines, scan.bytes_read, scan.candidates) == (3, 21, 2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("chunk", [1024, 1500, 1 << 20])
def test_file_line_numbers_are_right_across_chunk_boundaries(backend, chunk, numpy_or_not, tmp_path):
    literals = list(Prefilter.from_catalog(CATALOG).literals)
    lines = random_lines(literals, 1500, seed=chunk) + REAL
    lines.insert(900, "x" * 5000 + " NVRM: Xid (PCI:0000:06:00): 79, a line longer than the buffer")
    path = tmp_path / "big.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    pf = Prefilter(literals, backend)
    scan = pf.scan_file(path, chunk_size=chunk)
    got = [(h.number, h.line.decode(), h.literals) for h in scan]
    want = [(i + 1, line, ids) for i, line, ids in naive(list(pf.literals), lines)]
    assert got == want
    assert scan.lines == len(lines) == count_newlines(path)
    assert scan.bytes_read == path.stat().st_size

    gz = tmp_path / "big.log.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert [(h.number, h.line.decode(), h.literals) for h in pf.scan_file(gz, chunk_size=chunk)] == want
    assert count_newlines(gz) == len(lines)

    # Two byte ranges cut at a line start, the second numbered after the first: the same hits.
    cut = len(("\n".join(lines[:777]) + "\n").encode())
    head = list(pf.scan_file(path, chunk, start=0, end=cut))
    tail = list(pf.scan_file(path, chunk, start=cut, first_line=count_newlines(path, 0, cut) + 1))
    assert [(h.number, h.line.decode(), h.literals) for h in head + tail] == want


def test_the_fast_path_and_the_fallback_agree():
    if "hyperscan" not in BACKENDS:
        pytest.skip("hyperscan is not installed here")
    literals = list(Prefilter.from_catalog(CATALOG).literals)
    text = ("\n".join(random_lines(literals, 5000, seed=99) + REAL) + "\nlast NVRM: Xid").encode()
    fast, slow = Prefilter(literals, "hyperscan"), Prefilter(literals, "re")
    assert list(fast.hits(text)) == list(slow.hits(text))
    assert fast.backend == "hyperscan"
    assert slow.backend == "re"


def test_literals_must_be_one_line_and_not_empty():
    with pytest.raises(ValueError, match="at least one literal"):
        Prefilter([])
    with pytest.raises(ValueError, match="within one line"):
        Prefilter(["ok", "two\nlines"])
    with pytest.raises(ValueError, match="within one line"):
        Prefilter([""])


def test_rules_for_names_the_rules_each_literal_gates_in_catalog_order():
    pf = Prefilter.from_catalog(CATALOG)
    for k, lit in enumerate(pf.literals):
        assert [r.id for r in pf.rules_for([k])] == [r.id for r in CATALOG.rules if lit in r.literals]
    both = [0, len(pf.literals) - 1]
    assert [r.id for r in pf.rules_for(both)] == [
        r.id for r in CATALOG.rules if {pf.literals[0], pf.literals[-1]} & set(r.literals)
    ]


def test_the_narrowed_extractor_gives_the_full_catalogs_signals():
    pf = Prefilter.from_catalog(CATALOG)
    full = Extractor(CATALOG)
    lines = REAL + random_lines(list(pf.literals), 300, seed=7)
    text = "\n".join(lines).encode()
    checked = 0
    for hit in pf.hits(text):
        line = LogLine(text=hit.line.decode(), adapter="plain")
        pos = Position(file="x.log", line=hit.number)
        narrowed = pf.extractor_for(hit.literals).extract(line, NOW, pos)
        assert narrowed == full.extract(line, NOW, pos)
        checked += bool(narrowed)
    assert checked >= len([r for r in CATALOG.rules if r.examples[0].match]) // 2
    # and lines the prefilter passes over give no signal at all
    passed = {hit.number for hit in pf.hits(text)}
    for i, line in enumerate(lines):
        if i not in passed:
            assert full.extract(LogLine(text=line, adapter="plain"), NOW) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrapped_lines_names_the_line_a_literal_runs_on_from(backend, numpy_or_not):
    pf = Prefilter(["Watchdog caught collective", "xyz"], backend)
    text = b"first line\n[Rank 2] Watchdog caught \ncollective operation timeout\nxyz whole\nx\nyz\n"
    # line 1 ends inside the first literal; "xyz" on line 3 is whole (the usual scan has it), and
    # "x" / "yz" (lines 4, 5) join into a literal too: the caller decides whether that is a wrap
    assert pf.wrapped_lines(text) == [1, 4]
    assert pf.wrapped_lines(b"no newline at all Watchdog caught collective") == []
    assert pf.wrapped_lines(b"Watchdog caught collective\nxyz\n") == []
