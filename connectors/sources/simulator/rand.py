"""Seeded randomness: every choice the simulator makes comes from here, so one seed fixes every byte.

Sub-generators are derived from the seed and a path of names (``rng(seed, "node", 17)``),
never from Python's ``hash()`` (salted per process) or the wall clock.
"""

from __future__ import annotations

import hashlib
import random
import string
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")
_ALNUM = string.ascii_lowercase + string.digits


def derive(seed: int, *parts: object) -> int:
    """A 64-bit seed for the sub-stream named by ``parts``: stable across processes and runs."""
    text = "|".join([str(seed), *(str(p) for p in parts)])
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class Rng(random.Random):
    """``random.Random`` plus the few helpers log lines need (hex ids, UUIDs, weighted picks).

    Simulation only: nothing here is meant to be unpredictable to an attacker.
    """

    def hexstr(self, n: int) -> str:
        return f"{self.getrandbits(4 * n):0{n}x}"

    def alnum(self, n: int) -> str:
        return "".join(self.choice(_ALNUM) for _ in range(n))

    def uuid(self) -> str:
        h = self.hexstr(32)
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) % 4]}{h[17:20]}-{h[20:32]}"

    def chance(self, p: float) -> bool:
        return self.random() < p

    def weighted(self, options: Sequence[tuple[T, float]]) -> T:
        values = [o for o, _ in options]
        weights = [w for _, w in options]
        return self.choices(values, weights=weights, k=1)[0]

    def jitter(self, base: float, spread: float) -> float:
        """``base`` ± ``spread`` (uniform), never negative."""
        return max(0.0, base + self.uniform(-spread, spread))


def rng(seed: int, *parts: object) -> Rng:
    return Rng(derive(seed, *parts))
