"""Score the default search against random search and a plain GP on the recorded landscapes; write
docs/results/replay.md.

    nice -n 10 .venv/bin/python benchmarks/replay.py                 # the full run (about 2 hours on 2 cores)
    .venv/bin/python benchmarks/replay.py --repeats 2 --quick        # a smoke run (a few minutes)

What it measures, all in this run:
1. Every landscape in ../shared/landscapes/ (`*.json` and `*.json.gz`): `bayes` (the default strategy), `random`
   search, `gp-ei` (the plain GP with expected improvement, `tracea_cli/tune/strategies/gp_ei.py`) and `vns` (a
   variable-neighbourhood search with a k-NN pre-screen, for reference), `--repeats` seeded repeats each (seeds 0,
   1, ...; the same for all), budget 200. Strategies do not know the budget, so
   the first b evaluations of a run are exactly a budget-b run: budgets 20, 40, 60, 100 and 200 come from the same
   traces. Per landscape and budget: the mean fraction of the optimum, the share of repeats within 95 % of it, and
   the methodology score (strategy - random) / (optimum - random), averaged over the five budgets.
2. Batches: bayes asking 4 or 8 at a time (8: what the driver asks for on a GPU) against 1 at a time, budget 60.
3. Overhead: the time of one proposal plus one model update (ask(1) + tell) at 190-210 observations on a
   241,600-configuration synthetic space (enumerated and encoded once, timed apart), measured alone after
   everything else, with the load average.
Targets (issue 20) are checked at the end of the report.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import itertools
import math
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from tempfile import gettempdir

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracea_cli.space import Candidates, Param  # noqa: E402
from tracea_cli.tune.landscape import Landscape, load_landscape  # noqa: E402
from tracea_cli.tune.replay import methodology_score, search_trace  # noqa: E402
from tracea_cli.tune.strategies import make_strategy  # noqa: E402

BUDGETS = (20, 40, 60, 100, 200)
STRATEGIES = ("bayes", "random", "gp-ei", "vns")
BATCHES = (4, 8)  # the driver asks for 8 at a time on a GPU
WITHIN = 0.95
LARGE_SPACE = 241_600


def landscape_files(folder: Path) -> list[Path]:
    """The recorded landscapes in `folder`, plain or gzip-compressed JSON, by name."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))


def short_name(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".json")


_LOADED: dict[Path, Landscape] = {}


def _landscape(path: Path) -> Landscape:
    if path not in _LOADED:  # each worker process reads a file once
        _LOADED[path] = load_landscape(path)
    return _LOADED[path]


# The code each strategy's traces depend on: a cached trace counts only while these files are unchanged.
_SOURCES = {
    "random": ("random.py", "base.py"),
    "gp-ei": ("gp_ei.py", "base.py", "encoding.py", "gp.py"),
    "bayes": ("bayes.py", "base.py", "encoding.py", "gp.py"),
    "vns": ("neighbourhood.py", "base.py", "encoding.py"),
}
_ALL_SOURCES = tuple(sorted(p.name for p in (ROOT / "tracea_cli" / "tune" / "strategies").glob("*.py")))


def code_version(strategy: str) -> str:
    """A hash of the source files `strategy`'s behaviour depends on (every strategy module when not listed), and
    of the replay loop."""
    digest = hashlib.sha256()
    for name in _SOURCES.get(strategy, _ALL_SOURCES):
        digest.update((ROOT / "tracea_cli" / "tune" / "strategies" / name).read_bytes())
    digest.update((ROOT / "tracea_cli" / "tune" / "replay.py").read_bytes())
    return digest.hexdigest()[:16]


def _trace(job: tuple[Path, str, int, int, int, Path | None]) -> tuple[Path, str, int, int, np.ndarray, float]:
    """One seeded run; with a cache folder, a trace made before by the same code is read instead of re-run (the
    CPU time then is the one recorded with it)."""
    path, strategy, seed, budget, batch, cache = job
    out = None
    if cache is not None:
        folder = cache / f"{strategy}-{code_version(strategy)}"
        out = folder / f"{short_name(path)}_b{budget}_x{batch}_s{seed}.npy"
        # A strategy does not know the budget: the first b evaluations of a longer run are a budget-b run.
        for saved_path in sorted(folder.glob(f"{short_name(path)}_b*_x{batch}_s{seed}.npy")):
            saved = np.load(saved_path)
            if len(saved) - 1 >= budget:
                return path, strategy, seed, batch, saved[:budget], float(saved[-1])
    began = time.process_time()
    trace = np.array(search_trace(_landscape(path), strategy, budget=budget, seed=seed, batch=batch))
    seconds = time.process_time() - began
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}.tmp.npy")
        np.save(tmp, np.append(trace, seconds))
        tmp.replace(out)
    return path, strategy, seed, batch, trace, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--landscapes", type=Path, default=ROOT.parent / "shared" / "landscapes")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--batch-repeats", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="budget 60 and no overhead run, for a smoke test")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "results" / "replay.md")
    parser.add_argument("--cache", default=str(Path(gettempdir()) / "tracea-replay"),
                        help="folder of traces kept between runs (keyed by the strategy's code); '' for none")
    parser.add_argument("--plain-budget", type=int, default=BUDGETS[-1],
                        help="the budget of the gp-ei baseline's runs (its refits from scratch cost minutes per run "
                        "at 200); its columns beyond it are left empty")
    parser.add_argument("--only", nargs="+", choices=STRATEGIES,
                        help="run only these strategies' traces into the cache, and write no report")
    args = parser.parse_args()
    cache = Path(args.cache) if args.cache else None
    budgets = BUDGETS[:3] if args.quick else BUDGETS

    files = landscape_files(args.landscapes)
    if not files:
        print(f"no landscapes (*.json, *.json.gz) in {args.landscapes}", file=sys.stderr)
        return 2
    started = time.time()
    load_before = os.getloadavg()
    top = budgets[-1]
    jobs = [(f, s, seed, min(top, args.plain_budget) if s == "gp-ei" else top, 1, cache)
            for f in files for s in (args.only or STRATEGIES) for seed in range(args.repeats)]
    if not args.only:
        jobs += [(f, "bayes", seed, 60, b, cache) for b in BATCHES for f in files for seed in range(args.batch_repeats)]
    traces: dict[tuple[Path, str, int], list[np.ndarray]] = {}
    cpu: dict[str, list[float]] = {}
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for done, (path, strategy, seed, batch, trace, seconds) in enumerate(pool.map(_trace, jobs, chunksize=1), 1):
            traces.setdefault((path, strategy, batch), []).append(trace)
            if batch == 1:
                cpu.setdefault(strategy, []).append(seconds)
            print(f"\r{done}/{len(jobs)} runs", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    if args.only:
        return 0
    overhead = None if args.quick else measure_overhead()
    load_after = os.getloadavg()

    text = report(args, files, budgets, traces, cpu, overhead, started, load_before, load_after)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)
    print(f"written to {args.output}", file=sys.stderr)
    return 0


# -- the large space for the overhead -------------------------------------------------------------------------------


def large_candidates() -> Candidates:
    """A kernel-like space of 241,600 configurations: nine parameters (one categorical), two constraints (threads
    per block, registers per thread), the first 241,600 valid combinations in enumeration order."""
    params = (
        Param("block_x", tuple(range(16, 257, 16))),
        Param("block_y", (1, 2, 4, 8, 16, 32)),
        Param("tile_x", tuple(range(1, 9))),
        Param("tile_y", tuple(range(1, 9))),
        Param("unroll", (0, 1, 2, 4, 8)),
        Param("vector", (1, 2, 4)),
        Param("read_only", (0, 1)),
        Param("padding", (0, 1)),
        Param("staging", ("none", "shared", "registers"), kind="categorical"),
    )
    names = [p.name for p in params]
    configs = []
    for combo in itertools.product(*(p.values for p in params)):
        config = dict(zip(names, combo))
        if config["block_x"] * config["block_y"] <= 1024 and config["tile_x"] * config["tile_y"] <= 40:
            configs.append(config)
            if len(configs) == LARGE_SPACE:
                break
    return Candidates(params=params, configs=tuple(configs))


def large_space_time(config) -> float:
    """A smooth bowl in log(time) with a few categorical offsets, failing where wide tiles meet unaligned blocks."""
    if config["block_x"] % 64 and config["tile_x"] == 8:
        return math.inf
    x = np.array([math.log2(config["block_x"]), math.log2(config["block_y"]), config["tile_x"], config["tile_y"]])
    log_time = float(((x - [6, 1, 3, 4]) ** 2 * [0.3, 0.5, 0.1, 0.1]).sum())
    log_time += 0.2 * (config["staging"] == "shared") + 0.1 * config["read_only"] + 0.05 * (config["unroll"] == 0)
    return math.exp(log_time)


def measure_overhead(*, seeds: int = 3) -> dict:
    """ms of ask(1) + tell at 190..209 observations on the large space (the search's own work, no evaluation)."""
    began = time.perf_counter()
    candidates = large_candidates()
    enumerated = time.perf_counter() - began
    times = [large_space_time(c) for c in candidates.configs]
    per_step: list[float] = []
    setup: list[float] = []
    loads = [os.getloadavg()[0]]
    for seed in range(seeds):
        began = time.perf_counter()
        strategy = make_strategy("bayes", candidates, seed=seed)
        setup.append(time.perf_counter() - began)
        for step in range(210):
            began = time.perf_counter()
            (index,) = strategy.ask(1)
            strategy.tell(index, times[index])
            elapsed = (time.perf_counter() - began) * 1e3
            if step >= 190:
                per_step.append(elapsed)
        loads.append(os.getloadavg()[0])
    return {"size": len(candidates), "enumerate_s": enumerated, "setup_s": statistics.median(setup),
            "median_ms": statistics.median(per_step), "mean_ms": statistics.fmean(per_step), "max_ms": max(per_step),
            "n": len(per_step), "load": loads}


# -- the report -----------------------------------------------------------------------------------------------------


def _means(traces: list[np.ndarray], budgets) -> list[float]:
    """Mean fraction at each budget; nan beyond the runs' length (the gp-ei baseline may run a shorter budget)."""
    return [float(np.mean([t[b - 1] for t in traces])) if b <= len(traces[0]) else math.nan for b in budgets]


def _shares(traces: list[np.ndarray], budgets) -> list[float]:
    return [float(np.mean([t[b - 1] >= WITHIN for t in traces])) if b <= len(traces[0]) else math.nan
            for b in budgets]


def _known(values: list[float], *others: list[float]) -> tuple[list[float], ...]:
    """`values` and `others` at the budgets where `values` is known."""
    keep = [k for k, v in enumerate(values) if not math.isnan(v)]
    return tuple([seq[k] for k in keep] for seq in (values, *others))


def _cell(mean: float, share: float) -> str:
    return "–" if math.isnan(mean) else f"{mean:.3f} ({share:.0%})"


def report(args, files, budgets, traces, cpu, overhead, started, load_before, load_after) -> str:
    import numpy
    import scipy
    import sklearn
    import skopt

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = " | ".join(f"@{b}" for b in budgets)
    rule = " | ".join("---" for _ in budgets)
    lines = [
        "# Search strategies on recorded landscapes (replay)",
        "",
        f"- Date: {now}; run time {time.time() - started:.0f} s.",
        f"- Machine: {_cpu_model()}, {os.cpu_count()} logical cores, {platform.system()} {platform.release()}, Python "
        f"{platform.python_version()}; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
        "(other work shared the machine).",
        f"- Versions: scikit-optimize {skopt.__version__}, scikit-learn {sklearn.__version__}, numpy "
        f"{numpy.__version__}, scipy {scipy.__version__}.",
        f"- Command: `{' '.join(['.venv/bin/python', 'benchmarks/replay.py', *sys.argv[1:]])}`",
        f"- {args.repeats} repeats per strategy and landscape, seeds 0..{args.repeats - 1}, the same seeds for every "
        "strategy. Fraction = optimum / best time found (0 if only failures); one evaluation per distinct "
        "configuration, failures included. Methodology score: (strategy - random) / (optimum - random) per budget "
        f"with mean fractions, averaged over budgets {', '.join(map(str, budgets))}.",
        "- Strategies: `bayes` (the default, settings chosen by leave-one-kernel-out cross-validation: "
        "docs/results/search_cv.md, search_cv_variants.md), `random` (without replacement), "
        "`gp-ei` (plain GP-EI: index encoding, Matern 5/2, log time, failures at 1.5x the worst seen), `vns` "
        "(variable-neighbourhood search with a k-NN pre-screen, tabu-free annealed acceptance and restarts)."
        + (f" gp-ei ran to budget {args.plain_budget} only (it refits its GP from scratch at every step: minutes "
           "per run beyond that on this machine); its later columns are empty and its comparisons use the budgets "
           "it ran." if args.plain_budget < budgets[-1] else ""),
        "- CPU time per run (median, process time): "
        + ", ".join(f"{s} {statistics.median(v):.1f} s" for s, v in cpu.items()) + ".",
        "",
        "## Mean fraction of the optimum (share of repeats within 95 %)",
        "",
        f"| landscape | configurations (failed) | strategy | {head} | methodology score |",
        f"| --- | --- | --- | {rule} | --- |",
    ]
    summary = {s: [] for s in STRATEGIES}
    checks = {"above_random": [], "vs_plain": []}
    for f in files:
        land = load_landscape(f)
        name = short_name(f)
        rand = _means(traces[(f, "random", 1)], budgets)
        for s in STRATEGIES:
            t = traces[(f, s, 1)]
            means, shares = _means(t, budgets), _shares(t, budgets)
            summary[s].append(means)
            meth = f"{methodology_score(*_known(means, rand)):.3f}" if s != "random" else "0 (by definition)"
            cells = " | ".join(_cell(m, sh) for m, sh in zip(means, shares))
            lines.append(f"| {name} | {len(land)} ({land.failed}) | {s} | {cells} | {meth} |")
        # every budget of the curve 20, 40, ... up to the largest
        curve = range(20, budgets[-1] + 1, 20)
        bayes_curve = _means(traces[(f, "bayes", 1)], curve)
        rand_curve = _means(traces[(f, "random", 1)], curve)
        below = [b for b, x, r in zip(curve, bayes_curve, rand_curve) if not x > r]
        checks["above_random"].append((name, below))
        plain, bayes, known = _known(_means(traces[(f, "gp-ei", 1)], budgets), _means(traces[(f, "bayes", 1)], budgets),
                                     list(budgets))
        gaps = [x - p for x, p in zip(bayes, plain)]
        checks["vs_plain"].append((name, min(gaps), known[int(np.argmin(gaps))]))
    lines += ["", "Mean over the landscapes:", "", f"| strategy | {head} | methodology score |", f"| --- | {rule} | --- |"]
    for s in STRATEGIES:
        mean = np.mean(summary[s], axis=0)
        meth = np.mean([methodology_score(*_known(m, r)) for m, r in zip(summary[s], summary["random"])])
        lines.append(f"| {s} | " + " | ".join("–" if math.isnan(v) else f"{v:.3f}" for v in mean) + f" | {meth:.3f} |")

    at60 = budgets.index(60)
    mean60 = float(np.mean([m[at60] for m in summary["bayes"]]))
    lines += [
        "",
        "## Targets (issue 20)",
        "",
        f"- Mean fraction at 60 evaluations over the landscapes >= 0.97: {mean60:.3f}, "
        f"{'met' if mean60 >= 0.97 else 'NOT met'}.",
    ]
    for name, below in checks["above_random"]:
        lines.append(f"- {name}: bayes above random at every budget 20..{budgets[-1]} (steps of 20): "
                     + ("yes." if not below else f"NO, not at {', '.join(map(str, below))}."))
    for name, gap, at in checks["vs_plain"]:
        lines.append(f"- {name}: bayes minus gp-ei, worst budget: {gap:+.3f} at {at} (target >= -0.01: "
                     f"{'met' if gap >= -0.01 else 'NOT met'}).")
    lines += ["- Each fold's held-out score: docs/results/search_cv_variants.md (the defaults' choice) and "
              "search_cv.md.", ""]

    lines += [
        f"## Batches: bayes asking 1, 4 or 8 at a time, {args.batch_repeats} repeats, budget 60",
        "",
        "Mean fraction at 60. Asking for several at once, the later picks of a batch are made before the earlier "
        "ones' results are known (the kriging believer spreads them out).",
        "",
        "| landscape | ask(1) | " + " | ".join(f"ask({b})" for b in BATCHES) + " |",
        "| --- | --- | " + " | ".join("---" for _ in BATCHES) + " |",
    ]
    for f in files:
        one = _means(traces[(f, "bayes", 1)][: args.batch_repeats], [60])[0]
        more = [_means(traces[(f, "bayes", b)], [60])[0] for b in BATCHES]
        lines.append(f"| {short_name(f)} | {one:.3f} | " + " | ".join(f"{m:.3f}" for m in more) + " |")
    lines.append("")

    if overhead:
        o = overhead
        lines += [
            "## Search overhead",
            "",
            f"On a synthetic space of {o['size']:,} configurations (`large_candidates` in this script: enumerated in "
            f"{o['enumerate_s']:.1f} s, encoded by the strategy in {o['setup_s']:.1f} s, both once), one proposal "
            f"plus one model update (ask(1) + tell) at 190-209 observations, 3 seeds, {o['n']} steps: median "
            f"{o['median_ms']:.1f} ms, mean {o['mean_ms']:.1f} ms (target <= 50 ms: "
            f"{'met' if o['mean_ms'] <= 50 else 'NOT met'}), max {o['max_ms']:.0f} ms; load average during the "
            f"measurement {min(o['load']):.1f}-{max(o['load']):.1f} on {os.cpu_count()} cores. The slow steps refit "
            "the kernel's hyperparameters (after every 10 % more data); the others update the posterior.",
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
