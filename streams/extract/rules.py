"""The rule catalog: signatures kept as data (TOML files), validated by pydantic.

A rule is a regular expression with named groups plus what a match means: the
signal's role in attribution, category, restartability and isolation scope.
Each rule carries its own positive and negative examples; one test runs them all.
Operators add site rules by pointing ``SICKBAY_RULES_DIR`` at more TOML files.

Per-code knowledge (the Xid catalog) lives in lookup tables: a rule names a table
and the group whose value is the key, and the entry overrides the rule's defaults.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.incidents import Category
from schemas.signals import Role
from streams.extract.summary import check as check_summary

RULES_DIR = Path(__file__).parent / "rules"
# A rule's or lookup entry's summary template, checked as the rule files load (streams/extract/summary.py).
SummaryTemplate = Annotated[str, AfterValidator(check_summary)]

Cast = Literal["str", "int", "float", "hostlist"]
SourceKind = Literal["kernel", "training", "scheduler", "telemetry", "other"]
Isolation = Literal["none", "gpu", "node", "link"]
# How the attribution engine treats a code whose meaning depends on history or company
# (failure-signatures.md §2.5). ``None``: the static meaning stands.
Context = Literal[
    "recurrence",  # application unless it repeats on the same GPU (Xid 13, 31): then hardware
    "sympathetic",  # follows another error (Xid 45, 94/95 with another Xid): never the root if another exists
    "companion",  # its meaning sharpens with a companion code (Xid 48 with 63/64, DRAM/SRAM 171/172)
    "decode",  # registers/sub-codes decide (Xid 74, 144-150): kept as reported, flagged for decoding
    "recovery_action",  # states the recovery action itself (Xid 154): overrides the companion's
    "lead",  # a hint that alone explains a failed log (host RAM at 95 %, corrected DIMM errors):
    # `sickbay diagnose` reports it at low confidence when the log holds no root and no cascade
]


class Example(BaseModel):
    model_config = ConfigDict(extra="forbid")

    line: str
    match: bool = True
    fields: dict[str, str | int | float | list[str]] = Field(default_factory=dict)


class Meaning(BaseModel):
    """What a match means; a lookup entry overrides any of these per code."""

    model_config = ConfigDict(extra="forbid")

    role: Role | None = None
    category: Category | None = None
    restartable: bool | None = None
    isolation: Isolation | None = None
    decisive: bool | None = None
    summary: SummaryTemplate | None = None
    weight: int | None = Field(default=None, ge=0, le=100)
    context: Context | None = None


class LookupEntry(Meaning):
    name: str = ""
    action: str = ""  # the vendor's recommended action, kept for operators


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")
    source: SourceKind
    group: str | None = None  # at most one rule of a group fires per line (first in order wins)
    literals: list[str] = Field(min_length=1)  # any of these must occur: the cheap prefilter
    pattern: str
    casts: dict[str, Cast] = Field(default_factory=dict)
    role: Role
    category: Category | None = None
    restartable: bool | None = None
    isolation: Isolation = "none"
    decisive: bool = False
    summary: SummaryTemplate
    # Specificity when choosing a root: generic catch-alls (a bare ``FooError:``) weigh less than
    # a specific signature and lose to it even when earlier. 50 is a specific signature.
    weight: int = Field(default=50, ge=0, le=100)
    context: Context | None = None
    # Where the line's rank marker may stand when the rule captures no rank: anywhere on the line
    # (an exception message naming its rank), or only before the match (a tqdm bar ends in \r, so
    # the next rank's message, and its marker, follow it on the same physical line).
    rank_scope: Literal["line", "before"] = "line"
    # A catch-all: it fires on a line only when no other rule did (so site rules and specific
    # signatures always win a line over it, whatever the file order).
    fallback: bool = False
    # The same fact again, for the same job (or node-only fact) on the same node, within this many
    # seconds of event time adds nothing the first one did not say (every rank of a node prints
    # NCCL's "net plugin not found" at every communicator init): the streaming extract stage sends
    # the first and drops the rest (``streams/extract/quiet.py``). ``sickbay diagnose`` keeps all.
    repeat_quiet_s: float | None = Field(default=None, gt=0)
    # A lead only a finished log can use (``sickbay diagnose``): the streaming extract stage does
    # not send it. The stream opens no window on a hint, and a live incident gains nothing from it
    # (a traceback's frames after a failure: each rank's, hundreds of lines).
    diagnose_only: bool = False
    lookup: str | None = None
    lookup_key: str | None = None
    examples: list[Example] = Field(min_length=2)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        re.compile(value)
        return value

    @model_validator(mode="after")
    def _examples_both_ways(self) -> Rule:
        if not any(e.match for e in self.examples) or all(e.match for e in self.examples):
            raise ValueError(f"rule {self.id}: needs at least one positive and one negative example")
        if (self.lookup is None) != (self.lookup_key is None):
            raise ValueError(f"rule {self.id}: lookup and lookup_key go together")
        return self

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern)

    @cached_property
    def anchored(self) -> bool:
        """The pattern holds a ``^`` that is not a negated class: it wants the line's own start,
        which a tool's prefix (``kubectl --timestamps``, pdsh) moves (``carriers.py``)."""
        return "^" in self.pattern.replace("[^", "").replace("\\^", "")

    @property
    def family(self) -> str:
        """The id's first part: gpu, network, nccl, cuda, framework, host, scheduler, infra, progress, ..."""
        return self.id.split(".", 1)[0]


class RuleFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rules: list[Rule] = Field(default_factory=list)
    lookups: dict[str, dict[str, LookupEntry]] = Field(default_factory=dict)


class Catalog:
    """All rules in evaluation order, plus lookup tables and one combined prefilter."""

    def __init__(self, rules: list[Rule], lookups: dict[str, dict[str, LookupEntry]]) -> None:
        ids = [r.id for r in rules]
        dupes = {i for i in ids if ids.count(i) > 1}
        if dupes:
            raise ValueError(f"duplicate rule ids: {sorted(dupes)}")
        for rule in rules:
            if rule.lookup and rule.lookup not in lookups:
                raise ValueError(f"rule {rule.id}: unknown lookup table {rule.lookup!r}")
        # Specific rules first, catch-alls last; file order otherwise (it decides a group's winner).
        self.rules = [r for r in rules if not r.fallback] + [r for r in rules if r.fallback]
        self.lookups = lookups
        from streams.extract.prefilter import Prefilter

        # One multi-literal scan decides which rules a line can match (hyperscan when installed).
        self.prefilter = Prefilter.from_catalog(self)

    def by_id(self, rule_id: str) -> Rule:
        for rule in self.rules:
            if rule.id == rule_id:
                return rule
        raise KeyError(rule_id)

    def candidates(self, text: str, within: tuple[int, ...] | None = None) -> Iterable[Rule]:
        """Rules whose literals occur in ``text``, in catalog order (most lines match none).

        ``within``: ids (of this catalog's prefilter) of literals known to hold every literal the
        text holds, those a scan of the record's bytes found where the text is a piece of them
        (``record.py``). The text is then only tested for those few, not scanned again: the same
        rules, without a scan call per line (on bench-stream's mix the rule choice went from 9 % to 3 % of
        the extract stage's samples)."""
        pf = self.prefilter
        if within is None:
            ids = pf.literal_ids(text.encode("utf-8", errors="surrogateescape"))
        else:
            literals = pf.literals
            ids = tuple(i for i in within if literals[i] in text)
        return pf.rules_for(ids) if ids else ()


def _load_file(path: Path) -> RuleFile:
    with path.open("rb") as fh:
        try:
            return RuleFile.model_validate(tomllib.load(fh))
        except (tomllib.TOMLDecodeError, ValueError) as exc:
            raise ValueError(f"{path}: {exc}") from exc


def load_catalog(extra_dirs: Iterable[Path] = ()) -> Catalog:
    """Built-in rules first, then site rules (``SICKBAY_RULES_DIR``, ``:``-separated)."""
    dirs = [RULES_DIR, *extra_dirs]
    env = os.environ.get("SICKBAY_RULES_DIR")
    if env:
        dirs.extend(Path(p) for p in env.split(os.pathsep) if p)
    rules: list[Rule] = []
    lookups: dict[str, dict[str, LookupEntry]] = {}
    for directory in dirs:
        for path in sorted(directory.glob("*.toml")):
            rf = _load_file(path)
            rules.extend(rf.rules)
            for name, table in rf.lookups.items():
                lookups.setdefault(name, {}).update(table)
    return Catalog(rules, lookups)
