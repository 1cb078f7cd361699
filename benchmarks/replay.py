"""Score the search strategies on recorded landscapes and write docs/results/replay.md.

    .venv/bin/python benchmarks/replay.py                       # the full run (about 15 minutes on 2 cores)
    .venv/bin/python benchmarks/replay.py --repeats 3 --quick   # a smoke run

What it measures, all in this run:
1. For each landscape in ../shared/landscapes/: bayes and random search, `--repeats` seeded repeats, budget
   `--curve-budget` (200). Strategies do not know the budget, so the first 60 evaluations of a run are exactly a
   budget-60 run: the budget-60 figures come from the same traces.
2. Generalisation: the same on synthetic landscapes (random kernel-like spaces drawn from seeds the strategy was
   never looked at with), budget 60.
3. Batches: bayes asking 4 at a time (kriging believer) against asking one at a time, budget 60.
4. Overhead: the median time of one proposal plus one model update (ask(1) + tell) at 190-210 observations, on
   the largest recorded landscape, measured alone after everything else.
Targets (issue 4): bayes mean fraction >= 0.95 at budget 60, above random at every budget 20..200, overhead <= 100 ms.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracea_cli.tune.landscape import Landscape, load_landscape, synthetic_landscape  # noqa: E402
from tracea_cli.tune.replay import ReplayResult, replay  # noqa: E402
from tracea_cli.tune.strategies import make_strategy  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--landscapes", type=Path, default=ROOT.parent / "shared" / "landscapes")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--budget", type=int, default=60)
    parser.add_argument("--curve-budget", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--synthetic", type=int, default=8, help="synthetic landscapes for the generalisation check")
    parser.add_argument("--quick", action="store_true", help="small budgets, for a smoke run")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "results" / "replay.md")
    args = parser.parse_args()
    if args.quick:
        args.curve_budget, args.synthetic = max(args.budget, 60), 2

    files = sorted(args.landscapes.glob("*.json")) if args.landscapes.is_dir() else []
    if not files:
        print(f"no landscapes in {args.landscapes}", file=sys.stderr)
        return 2
    started = time.time()
    load_before = os.getloadavg()
    with ProcessPoolExecutor(max_workers=2) as pool:
        recorded = list(pool.map(_score_file, files, [args.curve_budget] * len(files), [args.repeats] * len(files), [args.seed] * len(files)))
        synthetic_seeds = list(range(1000, 1000 + args.synthetic))
        synthetic = list(pool.map(_score_synthetic, synthetic_seeds, [args.budget] * len(synthetic_seeds), [min(args.repeats, 10)] * len(synthetic_seeds)))
        batched = list(pool.map(_score_batched, files, [args.budget] * len(files), [min(args.repeats, 10)] * len(files), [args.seed] * len(files)))
    overhead = _overhead(max(files, key=lambda f: f.stat().st_size), seeds=3)
    load_after = os.getloadavg()

    text = _report(args, recorded, synthetic, batched, overhead, started, load_before, load_after)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)
    print(f"written to {args.output}", file=sys.stderr)
    return 0


def _score_file(path: Path, budget: int, repeats: int, seed: int) -> ReplayResult:
    return replay(load_landscape(path), strategy="bayes", budget=budget, repeats=repeats, seed=seed)


def _score_synthetic(seed: int, budget: int, repeats: int) -> tuple[Landscape, ReplayResult]:
    landscape = synthetic_landscape(seed)
    return landscape, replay(landscape, strategy="bayes", budget=budget, repeats=repeats, seed=0)


def _score_batched(path: Path, budget: int, repeats: int, seed: int) -> tuple[str, float, float]:
    landscape = load_landscape(path)
    one = replay(landscape, strategy="bayes", budget=budget, repeats=repeats, seed=seed, batch=1).score("bayes")
    four = replay(landscape, strategy="bayes", budget=budget, repeats=repeats, seed=seed, batch=4).score("bayes")
    return path.name, one.mean_fraction, four.mean_fraction


def _overhead(path: Path, *, seeds: int) -> dict:
    """Median ms of ask(1) + tell at 190..210 observations (proposal and model update; no evaluation)."""
    landscape = load_landscape(path)
    per_step: list[float] = []
    for seed in range(seeds):
        strategy = make_strategy("bayes", landscape.candidates, seed=seed)
        for step in range(210):
            t0 = time.perf_counter()
            (index,) = strategy.ask(1)
            strategy.tell(index, landscape.times[index])
            elapsed = (time.perf_counter() - t0) * 1e3
            if step >= 190:
                per_step.append(elapsed)
    return {"file": path.name, "median_ms": statistics.median(per_step), "mean_ms": statistics.fmean(per_step),
            "max_ms": max(per_step), "n": len(per_step)}


def _report(args, recorded, synthetic, batched, overhead, started, load_before, load_after) -> str:
    import numpy
    import scipy
    import sklearn
    import skopt

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cpu = _cpu_model()
    lines = [
        "# Search strategies on recorded landscapes (replay)",
        "",
        f"- Date: {now}; run time {time.time() - started:.0f} s.",
        f"- Machine: {cpu}, {os.cpu_count()} logical cores, {platform.system()} {platform.release()}, Python "
        f"{platform.python_version()}; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
        "(other work shared the machine).",
        f"- Versions: scikit-optimize {skopt.__version__}, scikit-learn {sklearn.__version__}, numpy {numpy.__version__}, "
        f"scipy {scipy.__version__}.",
        f"- Command: `{' '.join(['.venv/bin/python', 'benchmarks/replay.py', *sys.argv[1:]])}`",
        f"- Seeds {args.seed}..{args.seed + args.repeats - 1}; bayes and random search get the same seeds. Fraction = "
        "optimum / best time found (0 if only failures); one evaluation per distinct configuration, failures included.",
        "",
        f"## Recorded landscapes: {args.repeats} repeats, budget {args.budget} (and the curve up to {args.curve_budget})",
        "",
        f"| landscape | configurations (failed) | strategy | mean fraction @{args.budget} | within 95% @{args.budget} | "
        + " | ".join(f"@{b}" for b in recorded[0].strategies[0].curve_budgets) + " |",
        "| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in recorded[0].strategies[0].curve_budgets) + " |",
    ]
    verdicts = []
    for result in recorded:
        name = Path(result.source).name
        for score in result.strategies:
            final = [f[args.budget - 1] for f in score.fractions]
            mean60 = sum(final) / len(final)
            within = sum(f >= 0.95 for f in final) / len(final)
            lines.append(
                f"| {name} | {result.configurations} ({result.failed}) | {score.name} | {mean60:.3f} | {within:.0%} | "
                + " | ".join(f"{v:.3f}" for v in score.curve) + " |"
            )
        bayes, rand = result.score("bayes"), result.score("random")
        mean60 = bayes.mean_at(args.budget)
        above = all(b > r for b, r in zip(bayes.curve, rand.curve))
        verdicts.append(
            f"- {name}: bayes {mean60:.3f} at budget {args.budget} (target >= 0.95: {'met' if mean60 >= 0.95 else 'NOT met'}); "
            f"above random at every budget {bayes.curve_budgets[0]}..{bayes.curve_budgets[-1]}: {'yes' if above else 'NO'}."
        )
    lines += ["", *verdicts, ""]

    lines += [
        f"## Generalisation: synthetic landscapes, {min(args.repeats, 10)} repeats, budget {args.budget}",
        "",
        "Random kernel-like spaces (`tracea_cli.tune.landscape.synthetic_landscape`, seeds below), never used to choose "
        "any setting.",
        "",
        "| seed | configurations (failed) | bayes | random | bayes within 95% | random within 95% |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    wins = ties = 0
    for landscape, result in synthetic:
        b, r = result.score("bayes"), result.score("random")
        wins += b.mean_fraction > r.mean_fraction
        ties += b.mean_fraction == r.mean_fraction
        lines.append(
            f"| {landscape.source.split(':')[1]} | {len(landscape)} ({landscape.failed}) | {b.mean_fraction:.3f} | "
            f"{r.mean_fraction:.3f} | {b.share_within_95:.0%} | {r.share_within_95:.0%} |"
        )
    lines += ["", f"bayes ahead of random on {wins} of {len(synthetic)}, level on {ties}, behind on "
              f"{len(synthetic) - wins - ties}.", ""]

    lines += [
        f"## Batches: bayes asking 1 or 4 at a time, {min(args.repeats, 10)} repeats, budget {args.budget}",
        "",
        "| landscape | ask(1) | ask(4) |",
        "| --- | --- | --- |",
        *(f"| {name} | {one:.3f} | {four:.3f} |" for name, one, four in batched),
        "",
        "## Search overhead",
        "",
        f"Proposal + model update (ask(1) + tell) at 190-210 observations on {overhead['file']}, 3 seeds, "
        f"{overhead['n']} steps: median {overhead['median_ms']:.1f} ms (target <= 100 ms: "
        f"{'met' if overhead['median_ms'] <= 100 else 'NOT met'}), mean {overhead['mean_ms']:.1f} ms, max "
        f"{overhead['max_ms']:.0f} ms. The slow steps refit the kernel's hyperparameters (after every 10% more data); "
        "the others update the posterior.",
        "",
    ]
    return "\n".join(lines)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    raise SystemExit(main())
