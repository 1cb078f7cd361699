"""The CSV report: one row per problem and provider, plain numbers in SI units (spreadsheets do the rest)."""

from __future__ import annotations

import csv
import io
import json

from tracea_cli.bench.results import BenchResults

COLUMNS = (
    "problem", "op", "m", "n", "k", "dtype", "layout", "epilogue", "provider", "kind", "status",
    "median_ms", "q1_ms", "q3_ms", "cv", "n_samples", "flops", "bytes", "flops_per_s", "bytes_per_s",
    "pct_of_ceiling", "speedup", "speedup_low", "speedup_high", "speedup_over", "throttled_samples",
    "rel_error", "config", "reason",
)


def _cell(x) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        return repr(x)
    return str(x)


def render_csv(results: BenchResults) -> str:
    specs = {p.problem: p.spec for p in results.problems}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in results.results:
        spec = specs.get(r.problem, {})
        s = r.speedup
        writer.writerow(_cell(x) for x in (
            r.problem, spec.get("op"), spec.get("m"), spec.get("n"), spec.get("k"), spec.get("dtype"), spec.get("layout"),
            spec.get("epilogue"), r.provider, r.kind, r.status,
            r.median_ms, r.q1_ms, r.q3_ms, r.cv, r.n, r.flops, r.bytes, r.flops_per_s, r.bytes_per_s,
            r.pct_of_ceiling, s.estimate if s else None, s.low if s else None, s.high if s else None, r.speedup_over,
            r.throttled_samples, r.rel_error, json.dumps(dict(r.config), sort_keys=True) if r.config else None, r.reason,
        ))
    return out.getvalue()
