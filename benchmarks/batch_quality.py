"""Batch quality and batch speed of the Bayesian search through the replay executor (issue 18); writes
docs/results/batch_quality.md.

    nice -n 10 .venv/bin/python benchmarks/batch_quality.py                       # 100 repeats, budget 60
    .venv/bin/python benchmarks/batch_quality.py --repeats 2 --out /tmp/bq.md     # a smoke run

What it measures, all in this run:
1. Quality. On every landscape in ../shared/landscapes/ (`*.json`, `*.json.gz`, read in place), `bayes` at budget
   60 run the way the tuning driver runs it: ask for as many candidates as the executor's capacity, send them to the
   executor (tune/replay_executor.py) as one batch, tell each outcome as it streams back. Capacity 1 (one worker)
   and capacity 4 (four logical workers: the strategy proposes 4 points from one state of its model, each believed
   at its prediction before the next), seeds 0..R-1, the same for both. Per landscape: the mean fraction of the
   optimum (optimum / best found) and the difference 4 - 1 with its standard error, paired by seed (a search either
   finds a landscape's best basin or stalls in another, so one seed's fraction moves by tenths: 20 repeats left a
   standard error of 0.05 on convolution_MI250X's difference, hence 100 by default). Target: |difference of the
   means| <= 0.01.
2. Speed. The same search on one landscape with a simulated delay per evaluation at 1, 2 and 4 workers: wall time
   per evaluation (the whole search's wall time / evaluations), which should fall with the workers.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracea_cli.target import Target  # noqa: E402
from tracea_cli.timing import TimingPolicy  # noqa: E402
from tracea_cli.tune.landscape import Landscape, load_landscape  # noqa: E402
from tracea_cli.tune.replay_executor import ReplayExecutor  # noqa: E402
from tracea_cli.tune.strategies import make_strategy  # noqa: E402
from tracea_cli.tune.workers import EvalJob  # noqa: E402

TARGET = Target(backend="replay", device_class="replay")


def landscape_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))


def search(landscape: Landscape, *, workers: int, budget: int, seed: int, delay_s: float = 0.0) -> tuple[float, float]:
    """One seeded bayes search through a replay executor of `workers`: (fraction of the optimum, wall seconds)."""
    strategy = make_strategy("bayes", landscape.candidates, seed=seed)
    best, done = math.inf, 0
    began = time.perf_counter()
    with ReplayExecutor(landscape, workers=workers, delay_s=delay_s) as executor:
        while done < budget:
            picks = strategy.ask(min(executor.capacity, budget - done))
            if not picks:
                break
            jobs = [EvalJob(done + k, None, landscape.configs[i], TARGET, TimingPolicy(), seed)
                    for k, i in enumerate(picks)]
            by_job = {job.job_id: i for job, i in zip(jobs, picks)}
            for outcome in executor.run(jobs):
                ev = outcome.evaluation
                cost = ev.samples.times_ms[0] if ev.ok else math.inf
                strategy.tell(by_job[outcome.job_id], cost)
                best = min(best, cost)
                done += 1
    wall = time.perf_counter() - began
    return (landscape.optimum / best if math.isfinite(best) else 0.0), wall


def paired_se(one: list[float], many: list[float]) -> float:
    """Standard error of mean(many) - mean(one), the searches paired by seed."""
    diffs = [b - a for a, b in zip(one, many)]
    return statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landscapes", type=Path, default=ROOT.parent / "shared" / "landscapes")
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--budget", type=int, default=60)
    parser.add_argument("--workers", type=int, default=4, help="the batch size compared with 1")
    parser.add_argument("--delay", type=float, default=0.05, help="simulated seconds per evaluation (speed part)")
    parser.add_argument("--speed-repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "batch_quality.md")
    args = parser.parse_args()
    if not args.landscapes.is_dir() or not landscape_files(args.landscapes):
        print(f"skipped: no recorded landscapes (*.json, *.json.gz) in {args.landscapes}", file=sys.stderr)
        return 0
    command = "python benchmarks/batch_quality.py " + " ".join(sys.argv[1:])
    started = datetime.datetime.now(datetime.timezone.utc)
    rows, loaded = [], {}
    for path in landscape_files(args.landscapes):
        landscape = loaded[path.name] = load_landscape(path)
        name = path.name.split(".json")[0]
        one = [search(landscape, workers=1, budget=args.budget, seed=s)[0] for s in range(args.repeats)]
        many = [search(landscape, workers=args.workers, budget=args.budget, seed=s)[0] for s in range(args.repeats)]
        rows.append((name, len(landscape), statistics.mean(one), statistics.mean(many), paired_se(one, many)))
        print(f"{name}: 1 worker {rows[-1][2]:.3f}, {args.workers} workers {rows[-1][3]:.3f}", file=sys.stderr,
              flush=True)
    mean_one = statistics.mean(r[2] for r in rows)
    mean_many = statistics.mean(r[3] for r in rows)
    mean_se = math.sqrt(sum(r[4] ** 2 for r in rows)) / len(rows)  # the landscapes' searches are independent

    speed_name = sorted(loaded)[0]
    speed = []
    for workers in (1, 2, 4):
        walls = [search(loaded[speed_name], workers=workers, budget=args.budget, seed=s, delay_s=args.delay)[1]
                 for s in range(args.speed_repeats)]
        speed.append((workers, statistics.median(walls) / args.budget))
        print(f"speed: {workers} workers {speed[-1][1] * 1e3:.1f} ms per evaluation", file=sys.stderr, flush=True)

    diff = mean_many - mean_one
    lines = [
        "# Batch quality: bayes at 1 and at k workers through the replay executor",
        "",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC; machine: {platform.node()}"
        f" ({platform.processor() or platform.machine()}, {os.cpu_count()} cores shared with other work),"
        f" Python {platform.python_version()}",
        f"- Command: `{command}`",
        f"- Budget {args.budget} evaluations, seeds 0..{args.repeats - 1} (the same at both widths); the driver's loop:"
        " ask(capacity), run the batch on the executor, tell each outcome as it streams back.",
        "",
        f"## Mean fraction of the optimum at budget {args.budget}",
        "",
        f"| landscape | configurations | 1 worker | {args.workers} workers | difference | its standard error |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {n} | {size} | {a:.3f} | {b:.3f} | {b - a:+.3f} | {se:.3f} |" for n, size, a, b, se in rows]
    lines += [f"| mean | | {mean_one:.3f} | {mean_many:.3f} | {diff:+.3f} | {mean_se:.3f} |", ""]
    lines += [f"Target: the {args.workers}-worker mean within 0.01 of the 1-worker mean: "
              f"{'met' if abs(diff) <= 0.01 else 'missed'} ({diff:+.3f}, standard error {mean_se:.3f}; per landscape"
              f" the standard error of the difference over {args.repeats} seeds, paired by seed, is in the table).",
              ""]
    lines += [f"## Wall time per evaluation, {args.delay * 1e3:.0f} ms simulated per evaluation ({speed_name},"
              f" median of {args.speed_repeats} searches)", "",
              "| workers | ms per evaluation | speed-up |", "| --- | --- | --- |"]
    lines += [f"| {w} | {s * 1e3:.1f} | {speed[0][1] / s:.2f}x |" for w, s in speed]
    lines += ["", "The model's own time per proposal (on this shared 2-core machine) is in every figure; it is why the"
              " speed-up is below the worker count.", ""]
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
