"""Drop repeats of a fact that a rule marks quiet (``repeat_quiet_s``), before they reach Kafka.

Some notices are printed by every rank at every communicator init (NCCL's "net plugin not found"):
a 4,000-GPU job sends 4,000 copies of one fact per node set, and every copy costs a message on
``signals.job`` and a pass through two agents, for nothing a first copy did not already say. The
extract stage keeps the event time of the last copy it sent per (rule, job, node) and drops
copies within the rule's quiet period.

What is dropped is only ever a repeat of something already sent, so the memory being per worker
(lost on restart, not shared on a rebalance) costs at most one extra copy, never a missing fact.
The memory is bounded: the oldest keys go first.
"""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime

from streams.extract.rules import Catalog, Rule

MAX_KEYS = 200_000


class RepeatQuieter:
    def __init__(self, catalog: Catalog, max_keys: int = MAX_KEYS) -> None:
        self.quiet_s = {r.id: r.repeat_quiet_s for r in catalog.rules if r.repeat_quiet_s}
        self.max_keys = max_keys
        self.dropped = 0
        self._last: OrderedDict[tuple[str, str | None, str | None], datetime] = OrderedDict()

    def streamed(self, rule: Rule, job_id: str | None, node: str | None, event_time: datetime) -> bool:
        """Whether the streaming stage sends this signal, asked before it is built
        (``Extractor.extract``'s ``wanted``): never a ``diagnose_only`` rule's, nor a quiet repeat."""
        return not rule.diagnose_only and self.keep_fact(rule.id, job_id, node, event_time)

    def keep_fact(self, rule: str, job_id: str | None, node: str | None, event_time: datetime) -> bool:
        """False for a copy of a quiet rule's fact sent less than its quiet period ago. Asked before
        the signal is built (``Extractor.extract``'s ``wanted``), so a dropped copy never costs its
        model."""
        quiet = self.quiet_s.get(rule)
        if quiet is None:
            return True
        key = (rule, job_id, node)
        last = self._last.get(key)
        if last is not None and abs((event_time - last).total_seconds()) < quiet:
            self.dropped += 1
            return False
        self._last[key] = event_time
        self._last.move_to_end(key)
        if len(self._last) > self.max_keys:
            self._last.popitem(last=False)
        return True
