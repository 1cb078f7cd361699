#!/usr/bin/env python3
"""Warm start: with winners for M = 1024 and M = 4096 cached, does tuning M = 2048 with a budget of 15 reach 95% of
what a 100-evaluation search finds?

    python3 benchmarks/warm_start.py [--backend cpu|cuda] [--dtype fp32] [--out docs/results/warm_start_cpu.md]

Runs `tracea_cli.tune.driver.tune` directly: two caches in a temporary folder, one seeded with the 1024 and 4096
winners (budget 20 each) and then tuned at 2048 with budget 15; the other tuned at 2048 from nothing with budget
100 (random search, so that its result does not share the Bayesian model's biases). Both winners are then timed again
side by side (A B A B) in one worker, and the ratio of the 100-evaluation winner's time to the warm-started one's is
the figure (>= 0.95 is the target).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracea_cli.config import Settings  # noqa: E402
from tracea_cli.ops.gemm.problem import GemmProblem  # noqa: E402
from tracea_cli.stats import summarize  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402
from tracea_cli.tune import setup  # noqa: E402
from tracea_cli.tune.driver import TuneRequest, tune  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--out", default="docs/results/warm_start_cpu.md")
    args = ap.parse_args()
    began = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="tracea-warm-"))
    data = root / "data"

    def settings(name: str) -> Settings:
        return Settings.from_env({"TRACEA_CACHE_DIR": str(root / name), "TRACEA_DATA_DIR": str(data)})

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - began:6.0f} s] {msg}", flush=True)

    warm, cold = settings("warm"), settings("cold")
    for m in (1024, 4096):
        r = tune(TuneRequest(GemmProblem(m, m, m, dtype=args.dtype), backend=args.backend, budget=20, seed=1), settings=warm)
        log(f"seeded M={m}: {r.winner.median_ms:.3f} ms {r.winner.config}")
    p = GemmProblem(2048, 2048, 2048, dtype=args.dtype)
    w = tune(TuneRequest(p, backend=args.backend, budget=15, seed=2), settings=warm)
    log(f"warm start, budget 15: {w.winner.median_ms:.3f} ms {w.winner.config}")
    c = tune(TuneRequest(p, backend=args.backend, budget=100, strategy="random", seed=3), settings=cold)
    log(f"cold, budget 100: {c.winner.median_ms:.3f} ms {c.winner.config} ({c.evaluations} evaluations)")

    # Side by side, A B A B, in one worker: the two winners again.
    plan = setup.plan(TuneRequest(p, backend=args.backend), cold)
    policy = TimingPolicy(warmup=3, min_samples=15, max_samples=60, target_cv=0.01, max_seconds=3.0)
    times: dict[str, list[float]] = {"warm": [], "cold": []}
    with setup.pool(plan, cold) as pool:
        for round_ in range(2):
            for name, cfg in (("warm", w.winner.config), ("cold", c.winner.config)):
                (o,) = list(pool.run(setup.jobs(plan, [cfg], policy, seed=100 + round_), retarget=setup.retarget))
                times[name] += list(o.evaluation.samples.times_ms)
    tw, tc = summarize(times["warm"]).median, summarize(times["cold"]).median
    ratio = tc / tw
    verdict = "met" if ratio >= 0.95 else "not met"
    log(f"side by side: warm {tw:.3f} ms, cold-100 {tc:.3f} ms, ratio {ratio:.3f} ({verdict})")
    load = os.getloadavg()
    text = f"""# Warm start ({args.backend}, {args.dtype})

- date: {datetime.now(timezone.utc).isoformat(timespec='seconds')}
- machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average at the end {load[0]:.1f}
- command: `python3 benchmarks/warm_start.py --backend {args.backend} --dtype {args.dtype} --out {args.out}`

| search | budget | winner | its time, timed again side by side (A B A B) |
| --- | ---: | --- | ---: |
| warm start from the 1024 and 4096 winners (bayes) | 15 ({w.evaluations} run) | `{json.dumps(w.winner.config)}` | {tw:.3f} ms |
| from nothing (random) | 100 ({c.evaluations} run) | `{json.dumps(c.winner.config)}` | {tc:.3f} ms |

Warm-started winner reaches **{ratio:.1%}** of the 100-evaluation search's best (target >= 95%: {verdict}).
Total wall time {time.monotonic() - began:.0f} s.
"""
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0 if ratio >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
