from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from schemas.raw import LogLine
from streams.extract.extractor import Extractor
from streams.extract.rules import Rule, load_catalog

CATALOG = load_catalog()
EXTRACTOR = Extractor(CATALOG)
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CASES = [(rule.id, i, ex) for rule in CATALOG.rules for i, ex in enumerate(rule.examples)]


@pytest.mark.parametrize(("rule_id", "index", "example"), CASES, ids=[f"{r}-{i}" for r, i, _ in CASES])
def test_every_rule_example_matches_or_not_as_documented(rule_id, index, example):
    signals = EXTRACTOR.extract(LogLine(text=example.line, adapter="plain"), NOW)
    fired = [s for s in signals if s.rule == rule_id]
    if not example.match:
        assert fired == [], f"{rule_id} must not match: {example.line}"
        return
    assert len(fired) == 1, f"{rule_id} should match: {example.line}"
    s = fired[0]
    got = {**s.attrs, "gpu": s.gpu, "rank": s.rank, "job_id": s.job_id, "node": s.node}
    for key, want in example.fields.items():
        assert got[key] == want, f"{rule_id}: field {key}"


def test_rule_without_a_negative_example_is_refused():
    with pytest.raises(ValueError, match="positive and one negative"):
        Rule.model_validate(
            {
                "id": "x.only_positive",
                "source": "other",
                "literals": ["boom"],
                "pattern": "boom",
                "role": "root_candidate",
                "summary": "boom",
                "examples": [{"line": "boom"}, {"line": "boom again"}],
            }
        )


def test_site_rules_load_from_an_extra_directory(tmp_path: Path):
    (tmp_path / "site.toml").write_text("""
[[rules]]
id = "site.gpfs_unmounted"
source = "other"
literals = ["GPFS"]
pattern = 'GPFS: (?P<fs>\\w+) unmounted'
role = "root_candidate"
category = "infrastructure"
summary = "GPFS {fs} unmounted"
[[rules.examples]]
line = "GPFS: scratch unmounted"
[[rules.examples]]
line = "GPFS: scratch mounted"
match = false
""")
    catalog = load_catalog([tmp_path])
    signals = Extractor(catalog).extract(LogLine(text="mmfs: GPFS: scratch unmounted", adapter="plain"), NOW)
    assert [s.summary for s in signals] == ["GPFS scratch unmounted"]


def test_duplicate_rule_ids_are_refused(tmp_path: Path):
    rule = CATALOG.rules[0]
    (tmp_path / "dup.toml").write_text(
        f'[[rules]]\nid = "{rule.id}"\nsource = "other"\nliterals = ["a"]\npattern = "a"\n'
        'role = "hint"\nsummary = "a"\n[[rules.examples]]\nline = "a"\n'
        '[[rules.examples]]\nline = "b"\nmatch = false\n'
    )
    with pytest.raises(ValueError, match="duplicate rule ids"):
        load_catalog([tmp_path])
