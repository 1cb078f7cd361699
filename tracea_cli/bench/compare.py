"""`--compare OLD.json`: per problem and provider, the change in time with its 95% interval, and the verdict.

A change is significant only when the whole interval of new/old lies beyond the threshold (`stats.compare`):
noise that straddles 1 is not flagged, a real slowdown is. Regressions make `tracea bench` exit 1.
"""

from __future__ import annotations

from tracea_cli import stats
from tracea_cli.bench.results import BenchResults, Change, Comparison

THRESHOLD = 0.05  # a change under 5% is not worth a red mark, however certain


def compare_results(old: BenchResults, new: BenchResults, *, against: str = "", threshold: float = THRESHOLD) -> Comparison:
    """Match rows by (problem, provider) and judge each pair that has samples on both sides."""
    old_rows = {(r.problem, r.provider): r for r in old.results if r.ok and r.samples_ms}
    new_rows = {(r.problem, r.provider): r for r in new.results if r.ok and r.samples_ms}
    changes = []
    for key, n in new_rows.items():
        o = old_rows.get(key)
        if o is None:
            continue
        c = stats.compare(o.samples_ms, n.samples_ms, threshold=threshold)
        changes.append(
            Change(
                problem=n.problem,
                provider=n.provider,
                old_median_ms=float(o.median_ms),  # type: ignore[arg-type]
                new_median_ms=float(n.median_ms),  # type: ignore[arg-type]
                ratio=c.ratio,
                significant=c.significant,
                regression=c.regression,
                improvement=c.improvement,
            )
        )
    warnings = []
    if old.environment.device_class != new.environment.device_class:
        warnings.append(
            f"the old results were measured on {old.environment.device or old.environment.device_class!r}, these on "
            f"{new.environment.device or new.environment.device_class!r}: changes may come from the machine, not the code"
        )
    unmatched = sorted(f"{p} / {prov}" for (p, prov) in set(old_rows) ^ set(new_rows))
    return Comparison(
        against=against,
        against_created=old.environment.created,
        changes=tuple(changes),
        unmatched=tuple(unmatched),
        threshold=threshold,
        warnings=tuple(warnings),
    )
