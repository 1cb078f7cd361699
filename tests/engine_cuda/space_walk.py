"""Walking a search space for the space tests: every configuration with its verdict, or a spread of them."""

from __future__ import annotations

import itertools
import math
import os


def walk(space, at_most: int = 300_000):
    """Every configuration of the space with its verdict; a space larger than `at_most` raw configurations (the
    small-M spaces with sliced K: 6 million) is walked with a stride that spreads `at_most` of them over all of it
    (every TRACEA_SLOW_TESTS=1 run walks it whole)."""
    raw = math.prod(len(p.values) for p in space.params)
    step = 1 if os.environ.get("TRACEA_SLOW_TESTS") == "1" or raw <= at_most else -(-raw // at_most)
    while math.gcd(step, raw) != 1:  # a stride sharing no factor with the space's size meets every parameter value
        step += 1
    valid, rejected = [], []
    for config in itertools.islice(space.all_configs(), 0, None, step):
        reason = space.why_invalid(config)
        (rejected if reason else valid).append((config, reason))
    return [c for c, _ in valid], rejected
