"""Choose the default search's settings by leave-one-kernel-out cross-validation; write docs/results/search_cv.md.

    nice -n 10 .venv/bin/python benchmarks/search_cv.py               # the procedure behind the defaults (hours)
    .venv/bin/python benchmarks/search_cv.py --repeats 2 --budget 40  # a smoke run (minutes)
    nice -n 10 .venv/bin/python benchmarks/search_cv.py --variants --repeats 20  # whole-strategy variants (~1 h)

`--variants` runs a second, smaller procedure: leave-one-kernel-out over `VARIANTS`, whole strategies (the
defaults and changes of them that issue 20 proposed), each fold choosing the variant that scores best on the
other kernels; it writes docs/results/search_cv_variants.md. A variant replaces the defaults only if the held-out
folds say so.

The procedure (docs/search.md, "How the settings were chosen"):

1. Folds. The landscapes in ../shared/landscapes/ (`*.json`, `*.json.gz`) grouped by kernel (the file's
   `kernel_name`): one fold per kernel, so that both landscapes of one kernel are held out together.
2. Candidates. `START`, and for each setting in `DIMENSIONS` its other values, one at a time. Every candidate runs
   `--repeats` seeded repeats (seeds 0, 1, ...) on every landscape, budget `--budget`.
3. Score. A landscape's score is the mean fraction of the optimum averaged over the budgets 20, 40, ... in
   `SCORED_BUDGETS` up to the budget; a set of landscapes scores the mean of theirs.
4. A choice from training landscapes (those of every kernel but the held-out one): for each setting, the value
   whose candidate scores best on them (the start's value unless another beats it); then the start with the
   winning changes added one by one, largest gain first (each of these combinations runs too); the choice is
   whichever of all candidates run scores best on the training landscapes. Nothing in a choice looks at the
   held-out kernel, its name or its size.
5. The fold's held-out score: its choice on the held-out kernel's landscapes.
6. The final choice is step 4 with every landscape as training. It must be `BayesSettings()`, the defaults;
   the report says whether it is.

Traces are kept in `--cache` (one file per candidate, landscape and seed), so a run that stops resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from tempfile import gettempdir

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracea_cli.tune.landscape import Landscape, load_landscape  # noqa: E402
from tracea_cli.tune.replay import search_trace  # noqa: E402
from tracea_cli.tune.strategies.bayes import BayesSearch, BayesSettings  # noqa: E402

SCORED_BUDGETS = (20, 40, 60, 100, 200)

# Where the coordinate search starts: the search as it was before issue 20 (docs/search.md).
START: dict = {
    "encoding": "rank", "initial": None, "design": "lhs", "nu": 2.5, "min_length": 0.5, "max_length": 100.0,
    "length": 0.0, "failure": 0.0, "acquisition": "ei", "exploration": 0.01, "local": 0.0, "batch": 1,
    "main_effects": False, "local_moves": "adjacent", "portfolio": "fixed", "clip": 1.0, "global_length": 0.0,
    "local_acquisition": "same", "diverse": 0,
}

# Each setting the procedure chooses, with its values (the start's first), as overrides of START.
DIMENSIONS: tuple[tuple[str, tuple[tuple[str, dict], ...]], ...] = (
    # "index" (categorical parameters by position) is left out: no parameter of a Kernel Tuner file is categorical
    # (numbers are read as ordinal), so on these landscapes it is "rank" again.
    ("encoding", (
        ("rank", {}),
        ("rank + alignment", {"encoding": "rank+align"}),
        ("rank + alignment of stepped values", {"encoding": "rank+align-step"}),
    )),
    ("kernel and length scales", (
        ("Matern 5/2, fitted, 1/2 level step..100", {}),
        ("Matern 5/2, fitted, 1/2 level step..2", {"max_length": 2.0}),
        ("Matern 3/2, fitted, 1/2 level step..100", {"nu": 1.5}),
        ("Matern 3/2, fixed 1.5 (Kernel Tuner's)", {"nu": 1.5, "length": 1.5}),
        ("Matern 5/2 plus a main effect per parameter value", {"main_effects": True}),
    )),
    ("acquisition", (
        ("EI, xi 0.01", {}),
        ("EI, xi 0.1", {"exploration": 0.1}),
        ("LCB, kappa 2", {"acquisition": "lcb", "exploration": 2.0}),
    )),
    ("initial design", (
        ("Latin hypercube, 2 (d + 1) in [8, 20]", {}),
        ("Latin hypercube, 10", {"initial": 10}),
        ("Latin hypercube, 20", {"initial": 20}),
        ("random, 2 (d + 1) in [8, 20]", {"design": "random"}),
        ("random, 10", {"design": "random", "initial": 10}),
    )),
    ("failed configurations", (
        ("at the worst time seen", {}),
        ("at 1.5 x the worst time seen", {"failure": 0.405}),
    )),
    ("slow tail of log(time)", (
        ("as measured", {}),
        ("held at the median of the successes", {"clip": 0.5}),
        ("held at their lower quartile", {"clip": 0.25}),
    )),
    ("portfolio: share of neighbourhood moves", (
        ("none", {}),
        ("1/3", {"local": 1 / 3}),
        ("1/2", {"local": 0.5}),
        ("3/4", {"local": 0.75}),
        ("by credit (Thompson sampling on improvements of the best, in the run)", {"portfolio": "credit"}),
    )),
    ("neighbourhood moves", (
        ("one step first, then any value of one parameter", {}),
        ("any value of one parameter", {"local_moves": "any", "local": 0.5}),
    )),
    ("local search radius", (
        ("one parameter changed", {}),
        ("up to 2 parameters changed, half the moves", {"radius": 2, "local": 0.5, "local_moves": "any"}),
        ("up to 3 parameters changed, half the moves", {"radius": 3, "local": 0.5, "local_moves": "any"}),
    )),
    # Two surrogates (2026-12-07): the global moves scored by a GP with every length scale fixed, the local ones
    # (half the moves, as in the portfolio dimension) by the fitted GP.
    ("model of the global moves", (
        ("the fitted GP", {}),
        ("a smooth GP (length 1.5), half the moves local on the fitted GP",
         {"global_length": 1.5, "local": 0.5, "local_moves": "any"}),
        ("a smooth GP (length 0.75), half the moves local on the fitted GP",
         {"global_length": 0.75, "local": 0.5, "local_moves": "any"}),
    )),
    ("batch: proposals per model update", (
        ("1", {}),
        ("4", {"batch": 4}),
    )),
)


# The defaults of 2026-12-02 to 2026-12-06 as overrides of START (chosen by the full procedure then,
# docs/results/search_cv.md): one fitted GP for both kinds of move, a Latin hypercube start. The variants of the
# first two rounds below are changes of these.
PREVIOUS: dict = {"nu": 1.5, "clip": 0.25, "local": 0.5, "local_moves": "any"}
# The defaults of 2026-12-07 (morning), chosen by `--variants` (docs/results/search_cv_variants.md): the global
# moves scored by a second, smooth GP, and a random start of 10. The variants of the third and fourth rounds are
# changes of these.
DEFAULTS_1207: dict = {**PREVIOUS, "global_length": 1.5, "design": "random", "initial": 10}
# The defaults of 2026-12-07 (early afternoon), chosen by `--variants` from the fourth round: the local moves scored
# by probability of improvement, and another basin's neighbourhood after 12 local moves without a new best.
DEFAULTS_1207PI: dict = {**DEFAULTS_1207, "local_acquisition": "pi", "diverse": 12}
# The defaults since 2026-12-07 (late afternoon), chosen by `--variants` from the fifth round: probability of
# improvement for the global moves too.
DEFAULTS: dict = {**DEFAULTS_1207PI, "acquisition": "pi"}
# The defaults these replaced, held out in every fold beside the defaults (the report's last column).
REPLACED: dict = DEFAULTS_1207PI

# Whole-strategy variants for `--variants`: the defaults, and the changes proposed for issue 20 (local search over
# wider neighbourhoods, a local pool over several incumbents, more local moves, a portfolio by credit, a random
# start, two surrogates), as changes of the defaults they were proposed against (PREVIOUS). None is keyed to a
# landscape.
VARIANTS: tuple[tuple[str, dict], ...] = (
    ("the defaults", DEFAULTS),
    ("the defaults of 2026-12-07 early afternoon (EI for the global moves, PI for the local ones, another basin "
     "after 12 stale local moves)", DEFAULTS_1207PI),
    ("the defaults of 2026-12-07 morning (two models, random start of 10, EI for the local moves)", DEFAULTS_1207),
    ("the defaults of 2026-12-02 (one fitted GP, Latin hypercube start)", PREVIOUS),
    ("variable neighbourhoods up to 2 parameters, wider after 4 stale local moves",
     {**PREVIOUS, "radius": 2, "escalate": 4}),
    ("variable neighbourhoods up to 2 parameters, wider after 8 stale local moves",
     {**PREVIOUS, "radius": 2, "escalate": 8}),
    ("variable neighbourhoods up to 3 parameters, wider after 4 stale local moves",
     {**PREVIOUS, "radius": 3, "escalate": 4}),
    ("local pool over the neighbourhoods of the best 3", {**PREVIOUS, "local_from": 3}),
    ("2/3 of the model's moves local", {**PREVIOUS, "local": 2 / 3}),
    ("portfolio by credit", {**PREVIOUS, "portfolio": "credit"}),
    ("random start", {**PREVIOUS, "design": "random"}),
    # Issue 20, second round: random search's floor on flat landscapes (random interleaving, as SMAC does), and an
    # acquisition that explores by itself (Thompson sampling: the best of one joint posterior draw over the pool).
    ("1/3 of the turns after the start random", {**PREVIOUS, "random": 1 / 3}),
    ("1/2 of the turns random while they are fewer than the start's size", {**PREVIOUS, "random": 0.5,
                                                                             "random_until": 1.0}),
    ("Thompson sampling instead of EI", {**PREVIOUS, "acquisition": "ts"}),
    ("Thompson sampling for the global moves, EI for the local ones", {**PREVIOUS, "acquisition": "ts-global"}),
    ("Thompson sampling, random start", {**PREVIOUS, "acquisition": "ts", "design": "random"}),
    # The full procedure's final choice when re-run on 2026-12-03 with the local-radius dimension (search_cv.md):
    # it differs from the defaults; this checks whether it beats them in the folds before it could replace them.
    ("the full procedure's choice of 2026-12-03 (alignment of stepped values, start of 10, tail held at the median)",
     {**PREVIOUS, "encoding": "rank+align-step", "initial": 10, "radius": 2, "clip": 0.5}),
    # Issue 20, third round (2026-12-07): two surrogates. The local moves keep the fitted GP; the global moves are
    # scored by a second GP whose length scales are all fixed (1.5 encoded units, Kernel Tuner's value: a smooth
    # model of the whole space's trends). With and without the start as gp-ei's (10 random candidates), and the
    # pieces alone, so that the folds can tell which part carries. Both together are now the defaults (first).
    ("two models: global moves by a smooth GP (length 1.5)", {**PREVIOUS, "global_length": 1.5}),
    ("two models: global moves by a smooth GP (length 0.75)", {**PREVIOUS, "global_length": 0.75}),
    ("random start of 10", {**PREVIOUS, "design": "random", "initial": 10}),
    ("the defaults of 2026-12-07 morning with a shorter smooth model (length 0.75)",
     {**DEFAULTS_1207, "global_length": 0.75}),
    ("one smooth GP (length 1.5) for every move, random start of 10",
     {**PREVIOUS, "length": 1.5, "design": "random", "initial": 10}),
    # The full procedure's final choice when re-run on 2026-12-07 with the two-model dimension (search_cv.md): the
    # two models and the random start of 10 on the start's Matern 5/2 and unclipped tail.
    ("the full procedure's choice of 2026-12-07 (two models, random start of 10, Matern 5/2, tail as measured)",
     {"design": "random", "initial": 10, "global_length": 1.5, "local": 0.5, "local_moves": "any"}),
    # Issue 20, fourth round (2026-12-07, changes of the morning defaults): the global moves scored over a random
    # pre-screen pool instead of the whole space (the smooth model's EI otherwise favours the corners of the space);
    # a data-driven switch to random search while the fitted model's leave-one-out predictions of the results so far
    # rank-correlate below 0.3 (flat landscapes, where random search is strong early); GP-Hedge over EI, PI and LCB
    # (the acquisition portfolio Kernel Tuner's Bayesian optimisation builds on); and, after a number of local moves
    # without a new best, local moves from another basin (the best result two parameters or more from the best).
    ("the 2026-12-07 morning defaults, global moves over 500 random candidates", {**DEFAULTS_1207, "pool": 500}),
    ("the 2026-12-07 morning defaults, global moves random while the model's leave-one-out rank correlation is "
     "below 0.3",
     {**DEFAULTS_1207, "predictive": 0.3}),
    ("the 2026-12-07 morning defaults, every model move random while the model's leave-one-out rank correlation "
     "is below 0.3",
     {**DEFAULTS_1207, "predictive": 0.3, "unpredictive": "all"}),
    ("the 2026-12-07 morning defaults with GP-Hedge over EI, PI and LCB", {**DEFAULTS_1207, "acquisition": "hedge"}),
    ("the 2026-12-07 morning defaults, another basin's neighbourhood after 6 stale local moves",
     {**DEFAULTS_1207, "diverse": 6}),
    ("the 2026-12-07 morning defaults, another basin's neighbourhood after 12 stale local moves",
     {**DEFAULTS_1207, "diverse": 12}),
    # The local moves' pool scored by probability of improvement or by the predicted time alone instead of EI (EI
    # sends a neighbourhood walk first to the values the model knows least about: on a sharp landscape, one by one
    # through the slow values of a wide parameter), alone and with another basin's neighbourhood or a pool over the
    # neighbourhoods of the best 3.
    ("the 2026-12-07 morning defaults, local moves by probability of improvement",
     {**DEFAULTS_1207, "local_acquisition": "pi"}),
    ("the 2026-12-07 morning defaults, local moves by the lowest predicted time",
     {**DEFAULTS_1207, "local_acquisition": "mean"}),
    # (with another basin's neighbourhood after 12 stale local moves: chosen, the early afternoon's defaults)
    ("the 2026-12-07 morning defaults, local moves by probability of improvement over the neighbourhoods of the "
     "best 3",
     {**DEFAULTS_1207, "local_acquisition": "pi", "local_from": 3}),
    # Issue 20, fifth round (2026-12-07 afternoon, changes of the early afternoon's defaults): probability of
    # improvement for the global moves too (on the smooth model; chosen, now the defaults, first in this list),
    # without another basin; another basin after 6 stale moves.
    ("the early afternoon's defaults with probability of improvement for the global moves too, without another "
     "basin", {**DEFAULTS_1207PI, "acquisition": "pi", "diverse": 0}),
    ("the early afternoon's defaults, another basin's neighbourhood after 6 stale local moves",
     {**DEFAULTS_1207PI, "diverse": 6}),
    # Issue 20, sixth round (2026-12-07 evening, changes of the defaults): on a flat landscape the smooth model knows
    # nothing, and its global moves go to the corners of the space (where its variance is largest), which in a
    # constrained space are sparse and, on adding_A100, slower than a uniformly random candidate (measured: 0.7 % of
    # them within 95 % of the optimum against 3.2 % of the space). Either the global moves earn their turns against
    # random search's exact rate of beating the random start's best (`floor`), or they are scored over a uniformly
    # drawn pre-screen pool (plus the incumbents' neighbours), which keeps random search's density.
    ("the defaults, global moves random while they beat the random start's best less often than a random candidate "
     "would (Thompson sampling)", {**DEFAULTS, "floor": 1}),
    ("the defaults, global moves over 200 random candidates", {**DEFAULTS, "pool": 200}),
    ("the defaults, global moves over 1000 random candidates", {**DEFAULTS, "pool": 1000}),
)


@dataclasses.dataclass(frozen=True)
class Candidate:
    label: str
    overrides: dict

    @property
    def settings(self) -> BayesSettings:
        return BayesSettings(**{**START, **self.overrides})

    @property
    def key(self) -> str:
        """Names the candidate's traces: all of its settings and the version of the strategy's code."""
        settings = {k: v for k, v in dataclasses.asdict(self.settings).items() if _ADDED.get(k, object()) != v}
        text = json.dumps(settings, sort_keys=True) + STRATEGY_VERSION
        return hashlib.sha256(text.encode()).hexdigest()[:16]


# The version of the strategy's behaviour the cached traces belong to. Change it whenever what the search does
# with an existing setting changes (adding a setting whose default keeps the old behaviour needs no change); the
# run also re-runs a few cached traces and refuses to go on if they differ (`Runs.check`).
STRATEGY_VERSION = "8c5b1da4238c9aa5195510781661ff7403c72649c54baeec4e23c2d57d3c2026"
# Settings added since that version, with the value that does what the search did before them: left out of a key
# at that value, so that the traces made before they existed still count.
_ADDED = {"main_effects": False, "portfolio": "fixed", "clip": 1.0, "radius": 1, "local_from": 1, "escalate": 0,
          "random": 0.0, "random_until": 0.0, "ts_pool": 1000, "global_length": 0.0, "predictive": 0.0,
          "unpredictive": "global", "diverse": 0, "local_acquisition": "same", "floor": 0}


def landscape_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))


def short_name(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".json")


_LOADED: dict[Path, Landscape] = {}


def _landscape(path: Path) -> Landscape:
    if path not in _LOADED:
        _LOADED[path] = load_landscape(path)
    return _LOADED[path]


def _run(job) -> None:
    """One seeded search of one candidate on one landscape, its trace saved to `out`."""
    path, overrides, seed, budget, out = job
    settings = BayesSettings(**{**START, **overrides})
    trace = search_trace(_landscape(path), lambda c, seed: BayesSearch(c, seed=seed, settings=settings),
                         budget=budget, seed=seed)
    tmp = out.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp, np.array(trace))
    tmp.replace(out)


class Runs:
    """The traces of candidates on landscapes, run on demand (in parallel) and kept in a folder. Choices are made
    with `repeats` seeds (0, 1, ...); held-out scores may use more (`fractions(..., repeats=)`)."""

    def __init__(self, files: list[Path], *, repeats: int, budget: int, cache: Path, workers: int) -> None:
        self.files, self.repeats, self.budget, self.cache, self.workers = files, repeats, budget, cache, workers
        self.scored = tuple(b for b in SCORED_BUDGETS if b <= budget)
        self._scores: dict[tuple[str, Path, int], tuple[np.ndarray, np.ndarray]] = {}

    def _out(self, c: Candidate, path: Path, seed: int) -> Path:
        return self.cache / c.key / f"{short_name(path)}_b{self.budget}_s{seed}.npy"

    def ensure(self, candidates: list[Candidate], paths: list[Path] | None = None, repeats: int | None = None) -> None:
        jobs = []
        for c in {c.key: c for c in candidates}.values():  # the start appears once per setting: run it once
            (self.cache / c.key).mkdir(parents=True, exist_ok=True)
            (self.cache / c.key / "settings.json").write_text(json.dumps(dataclasses.asdict(c.settings), indent=1))
            for path in paths or self.files:
                for seed in range(repeats or self.repeats):
                    out = self._out(c, path, seed)
                    if not out.exists():
                        jobs.append((path, c.overrides, seed, self.budget, out))
        if not jobs:
            return
        began = time.time()
        with ProcessPoolExecutor(max_workers=self.workers) as pool:
            for done, _ in enumerate(pool.map(_run, jobs, chunksize=1), 1):
                print(f"\r{done}/{len(jobs)} runs, {time.time() - began:.0f} s", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)

    def check(self, c: Candidate) -> None:
        """Re-run seed 0 of `c` on every landscape whose trace is cached and compare: a stale cache stops the run."""
        for path in self.files:
            out = self._out(c, path, 0)
            if out.exists():
                fresh = out.with_name(out.stem + ".check.npy")
                _run((path, c.overrides, 0, self.budget, fresh))
                same = np.array_equal(np.load(fresh), np.load(out))
                fresh.unlink()
                if not same:
                    raise SystemExit(f"the cached trace {out} differs from a fresh run: the strategy's code changed. "
                                     "Change STRATEGY_VERSION in benchmarks/search_cv.py (or remove the cache).")

    def fractions(self, c: Candidate, path: Path, repeats: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Mean fraction of the optimum and share within 95 % at each scored budget."""
        repeats = repeats or self.repeats
        if (c.key, path, repeats) not in self._scores:
            traces = np.array([np.load(self._out(c, path, seed)) for seed in range(repeats)])
            at = traces[:, [b - 1 for b in self.scored]]
            self._scores[(c.key, path, repeats)] = at.mean(axis=0), (at >= 0.95).mean(axis=0)
        return self._scores[(c.key, path, repeats)]

    def score(self, c: Candidate, paths: list[Path], repeats: int | None = None) -> float:
        return float(np.mean([self.fractions(c, p, repeats)[0].mean() for p in paths]))


def combine(start: Candidate, changes: list[Candidate]) -> Candidate:
    """The start with the settings of `changes` applied in turn."""
    if not changes:
        return start
    overrides: dict = {}
    for c in changes:
        overrides.update(c.overrides)
    return Candidate("start + " + "; ".join(c.label.removeprefix("start, ") for c in changes), overrides)


def choose(runs: Runs, training: list[Path], singles, start: Candidate) -> tuple[dict, list[Candidate], Candidate]:
    """Step 4 of the procedure on `training`: the best value of each setting, then the combinations that add the
    winning changes one by one, largest gain first (so that two changes that clash cannot both be forced in), and
    the best-scoring of every candidate run."""
    base = runs.score(start, training)
    winners: dict[str, tuple[str, Candidate]] = {}
    for dim, options in singles.items():
        best = options[0]
        for option in options[1:]:
            if runs.score(option[1], training) > runs.score(best[1], training):
                best = option
        winners[dim] = best
    gains = sorted((c for _, c in winners.values() if c is not start), key=lambda c: -(runs.score(c, training) - base))
    path = [combine(start, gains[:k]) for k in range(2, len(gains) + 1)]
    runs.ensure(path)
    pool = [c for options in singles.values() for _, c in options] + path
    choice = max(pool, key=lambda c: runs.score(c, training))
    return winners, path, choice


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--landscapes", type=Path, default=ROOT.parent / "shared" / "landscapes")
    parser.add_argument("--repeats", type=int, default=10, help="seeds per candidate and landscape for the choices")
    parser.add_argument("--held-out-repeats", type=int, default=20, help="seeds for each fold's held-out score")
    parser.add_argument("--budget", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=Path(gettempdir()) / "tracea-search-cv")
    parser.add_argument("--output", type=Path, default=None,
                        help="default docs/results/search_cv.md (search_cv_variants.md with --variants)")
    parser.add_argument("--variants", action="store_true", help="leave-one-kernel-out over VARIANTS instead")
    args = parser.parse_args()
    if args.output is None:
        args.output = ROOT / "docs" / "results" / ("search_cv_variants.md" if args.variants else "search_cv.md")

    files = landscape_files(args.landscapes)
    if not files:
        print(f"no landscapes (*.json, *.json.gz) in {args.landscapes}", file=sys.stderr)
        return 2
    started, load_before = time.time(), os.getloadavg()
    kernels: dict[str, list[Path]] = {}
    for f in files:
        kernels.setdefault(_landscape(f).kernel, []).append(f)

    runs = Runs(files, repeats=args.repeats, budget=args.budget, cache=args.cache, workers=args.workers)
    if args.variants:
        text = variants_report(args, files, kernels, runs, started, load_before)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
        print(text)
        print(f"written to {args.output}", file=sys.stderr)
        return 0
    start = Candidate("start", {})
    singles = {dim: [(label, Candidate(f"start, {dim}: {label}", overrides) if overrides else start)
                     for label, overrides in options] for dim, options in DIMENSIONS}
    runs.check(start)
    runs.ensure([c for options in singles.values() for _, c in options])

    folds = []
    for kernel, held_out in kernels.items():
        training = [f for f in files if f not in held_out]
        winners, path, choice = choose(runs, training, singles, start)
        folds.append((kernel, held_out, training, winners, path, choice))
    final_winners, final_path, final = choose(runs, files, singles, start)
    for _, held_out, _, _, _, choice in folds:  # held-out scores with more seeds than the choices were made with
        runs.ensure([choice], held_out, args.held_out_repeats)

    text = report(args, files, kernels, runs, singles, start, folds, (final_winners, final_path, final),
                  started, load_before)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)
    print(f"written to {args.output}", file=sys.stderr)
    return 0


def report(args, files, kernels, runs: Runs, singles, start, folds, final_choice, started, load_before) -> str:
    import skopt

    final_winners, final_path, final = final_choice
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    scored = ", ".join(map(str, runs.scored))
    names = [short_name(f) for f in files]
    lines = [
        "# Choosing the search's settings: leave-one-kernel-out cross-validation",
        "",
        f"- Date: {now}; run time {time.time() - started:.0f} s (traces already in the cache are not re-run).",
        f"- Machine: {_cpu_model()}, {os.cpu_count()} logical cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, scikit-optimize {skopt.__version__}; load average {load_before[0]:.1f} "
        "at the start (other work shared the machine).",
        f"- Command: `{' '.join(['.venv/bin/python', 'benchmarks/search_cv.py', *sys.argv[1:]])}`",
        f"- {args.repeats} seeded repeats (seeds 0..{args.repeats - 1}) of every candidate on every landscape, "
        f"budget {args.budget}. Score of a landscape: the mean fraction of the optimum averaged over budgets "
        f"{scored}; of several landscapes: the mean of theirs.",
        "- Folds (one per kernel): " + "; ".join(f"{k} ({', '.join(short_name(p) for p in v)})"
                                                 for k, v in kernels.items()) + ".",
        "",
        "## Candidates: the start and one setting changed at a time",
        "",
        "Score per landscape (mean fraction averaged over the budgets; in brackets the mean fraction at 60).",
        "",
        "| setting | value | " + " | ".join(names) + " | all |",
        "| --- | --- | " + " | ".join("---" for _ in names) + " | --- |",
    ]
    at60 = runs.scored.index(60) if 60 in runs.scored else len(runs.scored) - 1
    for dim, options in singles.items():
        for label, c in options:
            cells = []
            for f in files:
                mean, _ = runs.fractions(c, f)
                cells.append(f"{mean.mean():.3f} ({mean[at60]:.3f})")
            label = label if c is not start else f"{label} (start)"
            lines.append(f"| {dim} | {label} | " + " | ".join(cells) + f" | {runs.score(c, files):.3f} |")
    lines += [
        "",
        "## Folds",
        "",
        f"Training scores with {args.repeats} seeds; held-out scores with {args.held_out_repeats} (seeds "
        f"0..{args.held_out_repeats - 1}) on the held-out kernel's landscapes, which no choice looked at.",
        "",
        "| held-out kernel | choice (made on the other kernels) | training score | held-out score | held-out "
        "mean fraction at 60 (within 95 %) |",
        "| --- | --- | --- | --- | --- |",
    ]
    hr = args.held_out_repeats
    for kernel, held_out, training, winners, path, choice in folds:
        at = "; ".join(f"{short_name(p)} {runs.fractions(choice, p, hr)[0][at60]:.3f} "
                       f"({runs.fractions(choice, p, hr)[1][at60]:.0%})" for p in held_out)
        lines.append(f"| {kernel} | {choice.label} | {runs.score(choice, training):.3f} | "
                     f"{runs.score(choice, held_out, hr):.3f} | {at} |")
    held60 = [float(np.mean([runs.fractions(choice, p, hr)[0][at60] for p in held_out]))
              for _, held_out, _, _, _, choice in folds]
    lines += [
        "",
        f"Held-out mean fraction at 60 per fold: {', '.join(f'{v:.3f}' for v in held60)} (target >= 0.95 in every "
        f"fold: {'met' if min(held60) >= 0.95 else 'NOT met'}); their mean {np.mean(held60):.3f}.",
        "",
        "## The final choice (every kernel as training)",
        "",
        "Best value of each setting alone (score on all landscapes):",
        "",
        *(f"- {dim}: {label} ({runs.score(c, files):.3f})" for dim, (label, c) in final_winners.items()),
        "",
        "Their combinations, largest gain first:",
        "",
        *(f"- {c.label}: {runs.score(c, files):.3f}" for c in final_path),
        "",
        f"- Choice: {final.label}, score {runs.score(final, files):.3f}.",
    ]
    defaults = dataclasses.asdict(BayesSettings())
    chosen = dataclasses.asdict(final.settings)
    differ = {k: (defaults[k], v) for k, v in chosen.items() if defaults[k] != v}
    lines.append("- `BayesSettings()` defaults: " + ("equal to the choice." if not differ else
                 "DIFFER from the choice in " + ", ".join(f"{k} (default {a!r}, chosen {b!r})"
                                                          for k, (a, b) in differ.items()) + "."))
    lines.append("")
    return "\n".join(lines)


def choose_variant(runs: Runs, training: list[Path], variants: list[Candidate]) -> Candidate:
    """The variant scoring best on `training` (the first, the defaults, unless another beats it)."""
    best = variants[0]
    for v in variants[1:]:
        if runs.score(v, training) > runs.score(best, training):
            best = v
    return best


def variants_report(args, files, kernels, runs: Runs, started, load_before) -> str:
    import skopt

    variants = [Candidate(label, overrides) for label, overrides in VARIANTS]
    # Held out in every fold, whatever the folds choose: the defaults, and the defaults they replaced.
    references = [variants[0], *(v for v in variants[1:] if v.overrides == REPLACED)]
    runs.ensure(variants)
    folds = []
    for kernel, held_out in kernels.items():
        training = [f for f in files if f not in held_out]
        choice = choose_variant(runs, training, variants)
        runs.ensure([choice, *references], held_out, args.held_out_repeats)
        folds.append((kernel, held_out, training, choice))
    final = choose_variant(runs, files, variants)
    hr = args.held_out_repeats
    at60 = runs.scored.index(60) if 60 in runs.scored else len(runs.scored) - 1
    names = [short_name(f) for f in files]
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Whole-strategy variants: leave-one-kernel-out cross-validation",
        "",
        f"- Date: {now}; run time {time.time() - started:.0f} s (traces already in the cache are not re-run).",
        f"- Machine: {_cpu_model()}, {os.cpu_count()} logical cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, scikit-optimize {skopt.__version__}; load average {load_before[0]:.1f} "
        "at the start (other work shared the machine).",
        f"- Command: `{' '.join(['.venv/bin/python', 'benchmarks/search_cv.py', *sys.argv[1:]])}`",
        f"- {args.repeats} seeded repeats (seeds 0..{args.repeats - 1}) of every variant on every landscape, budget "
        f"{args.budget}; score of a landscape: the mean fraction of the optimum averaged over budgets "
        f"{', '.join(map(str, runs.scored))}. Each fold chooses, on the other kernels' landscapes, the variant that "
        "scores best (the defaults unless another beats them); its held-out score uses "
        f"{hr} repeats (seeds 0..{hr - 1}).",
        "- The defaults were chosen with every kernel as training (the previous defaults by the full procedure, "
        "search_cv.md; the present ones by this comparison), so in the folds they have seen the held-out kernel, "
        "as have the previous defaults and the variant named after the full procedure's re-run; each fold's choice "
        "is made without it, and its held-out score is the honest one.",
        "",
        "## Variants",
        "",
        "Score per landscape (in brackets the mean fraction at 60).",
        "",
        "| variant | " + " | ".join(names) + " | all |",
        "| --- | " + " | ".join("---" for _ in names) + " | --- |",
    ]
    for v in variants:
        cells = [f"{runs.fractions(v, f)[0].mean():.3f} ({runs.fractions(v, f)[0][at60]:.3f})" for f in files]
        lines.append(f"| {v.label} | " + " | ".join(cells) + f" | {runs.score(v, files):.3f} |")
    lines += [
        "",
        "## Folds",
        "",
        "| held-out kernel | choice (made on the other kernels) | training score | held-out score | held-out mean "
        "fraction at 60 (within 95 %) | the defaults held out, at 60 | the previous defaults held out, at 60 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    held60, base60, previous60 = [], [], []
    previous = references[-1]
    for kernel, held_out, training, choice in folds:
        cell = "; ".join(f"{short_name(p)} {runs.fractions(choice, p, hr)[0][at60]:.3f} "
                         f"({runs.fractions(choice, p, hr)[1][at60]:.0%})" for p in held_out)
        base = "; ".join(f"{short_name(p)} {runs.fractions(variants[0], p, hr)[0][at60]:.3f}" for p in held_out)
        held60.append(float(np.mean([runs.fractions(choice, p, hr)[0][at60] for p in held_out])))
        base60.append(float(np.mean([runs.fractions(variants[0], p, hr)[0][at60] for p in held_out])))
        before = "; ".join(f"{short_name(p)} {runs.fractions(previous, p, hr)[0][at60]:.3f}" for p in held_out)
        previous60.append(float(np.mean([runs.fractions(previous, p, hr)[0][at60] for p in held_out])))
        lines.append(f"| {kernel} | {choice.label} | {runs.score(choice, training):.3f} | "
                     f"{runs.score(choice, held_out, hr):.3f} | {cell} | {base} | {before} |")
    lines += [
        "",
        f"Held-out mean fraction at 60 per fold: {', '.join(f'{v:.3f}' for v in held60)} (target >= 0.95 in every "
        f"fold: {'met' if min(held60) >= 0.95 else 'NOT met'}); their mean {np.mean(held60):.3f}.",
        "",
        f"The defaults held out, at 60: {', '.join(f'{v:.3f}' for v in base60)}; their mean {np.mean(base60):.3f}.",
        "",
        f"The previous defaults ({previous.label}) held out, at 60: {', '.join(f'{v:.3f}' for v in previous60)}; "
        f"their mean {np.mean(previous60):.3f}.",
        "",
        f"Held-out score over all budgets ({hr} seeds) per fold, the defaults against the previous defaults: "
        + "; ".join(f"{k} {runs.score(variants[0], h, hr):.3f} vs {runs.score(previous, h, hr):.3f}"
                    for k, h, _, _ in folds) + ".",
        "",
        f"- Choice with every kernel as training: {final.label} (score {runs.score(final, files):.3f}; the defaults "
        f"{runs.score(variants[0], files):.3f}).",
    ]
    # A variant replaces the defaults only if the folds' held-out choices beat the defaults held out, on average.
    gain = float(np.mean(held60) - np.mean(base60))
    if final is variants[0]:
        lines.append(f"- The defaults are this procedure's choice; the folds' held-out choices against the defaults "
                     f"they replaced ({previous.label}) held out: {float(np.mean(held60) - np.mean(previous60)):+.3f} "
                     "at 60.")
    elif gain > 0:
        lines.append(f"- The folds' held-out choices beat the defaults held out by {gain:+.3f} at 60: the default "
                     "search should become this variant.")
    else:
        lines.append(f"- The folds' held-out choices do not beat the defaults held out ({gain:+.3f} at 60): the "
                     "training gain does not carry to unseen kernels, and the default search stays as it is.")
    lines.append("")
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
