"""Signal summaries (streams/extract/summary.py): a bracketed part of a rule's template is dropped
when a field inside it did not match, so an operator never reads `SeqNum ?` or `port ?`."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schemas.raw import LogLine
from streams.extract.extractor import Extractor
from streams.extract.rules import load_catalog
from streams.extract.summary import Fields, check, render

CATALOG = load_catalog()
EXTRACTOR = Extractor(CATALOG)
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_an_optional_part_is_kept_when_its_fields_matched():
    fields = Fields(rank=6, op="ALLREDUCE", seq=42)
    assert render("timeout on rank {rank}[, {op}][, SeqNum {seq}]", fields) == (
        "timeout on rank 6, ALLREDUCE, SeqNum 42"
    )


def test_an_optional_part_is_dropped_when_a_field_inside_did_not_match():
    fields = Fields(rank=6, op="ALLREDUCE", seq=None)
    assert render("timeout on rank {rank}[, {op}][, SeqNum {seq}]", fields) == "timeout on rank 6, ALLREDUCE"


def test_a_missing_field_outside_brackets_still_prints_a_question_mark_and_is_recorded():
    fields = Fields()
    assert render("no active port {port}", fields) == "no active port ?"
    assert fields.missing == ["port"]


def test_lists_print_as_a_hostlist_inside_an_optional_part():
    assert render("allocated[ on {nodes}]", Fields(nodes=["gpu-01", "gpu-02"])) == "allocated on gpu-[01-02]"


@pytest.mark.parametrize("template", ["a [b [c]]", "a ]b", "a [b", "a {b"])
def test_a_template_the_renderer_would_misread_is_refused(template):
    with pytest.raises(ValueError):
        check(template)


def test_a_rule_with_a_bad_summary_is_refused_when_the_catalog_loads():
    from streams.extract.rules import Rule

    with pytest.raises(ValueError, match="unbalanced"):
        Rule.model_validate(
            {
                "id": "x.bad_summary",
                "source": "other",
                "literals": ["boom"],
                "pattern": "boom",
                "role": "root_candidate",
                "summary": "boom [{what}",
                "examples": [{"line": "boom"}, {"line": "calm", "match": False}],
            }
        )


def test_no_rule_example_renders_a_field_it_did_not_match(monkeypatch):
    """Every positive example of every rule renders its summary without a `?` for a missing field:
    a field its line may lack belongs in brackets."""
    from streams.extract import extractor

    rendered: dict[str, list[str]] = {}

    def recording(template: str, fields: Fields) -> str:
        text = render(template, fields)
        rendered[text] = list(fields.missing)
        return text

    monkeypatch.setattr(extractor, "render", recording)
    bad = []
    for rule in CATALOG.rules:
        for example in rule.examples:
            if not example.match:
                continue
            rendered.clear()
            for s in EXTRACTOR.extract(LogLine(text=example.line, adapter="plain"), NOW):
                if s.rule == rule.id and rendered.get(s.summary):
                    bad.append(f"{rule.id}: {s.summary!r} (no {', '.join(rendered[s.summary])})")
    assert bad == [], "\n".join(bad)
