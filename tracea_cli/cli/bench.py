"""`tracea bench`: benchmark a suite (or one problem) against the vendor library and render reports.

Thin: parse and validate (everything that can be wrong with the input is found before any long work), run through
`bench.runner` with the live engine, render through `report`, and decide the exit code: 1 when a measurement
failed or `--compare` found a regression, 2 for bad input.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any, List, Mapping, Optional

import typer

from tracea_cli.errors import RunFailed, UsageError


def _output_paths(formats: tuple[str, ...], output: Path | None, output_dir: Path | None, data_dir: Path, stamp: str) -> dict[str, Path]:
    """Where each file report goes: --output (one report), --output-dir, or the data folder's reports/."""
    from tracea_cli.files import check_writable
    from tracea_cli.report import EXTENSIONS

    files = [f for f in formats if f != "terminal"]
    if output is not None and output_dir is not None:
        raise UsageError("--output and --output-dir were both given.", "Use --output PATH for one report, or --output-dir DIR for several.")
    if output is not None:
        if len(files) != 1:
            raise UsageError(f"--output takes one file report, and {len(files)} were asked for ({', '.join(files) or 'only terminal'}).",
                             "Give exactly one of --report json|csv|md|html, or use --output-dir DIR.")
        return {files[0]: check_writable(output, f"{files[0]} report")}
    folder = output_dir if output_dir is not None else data_dir / "reports"
    return {f: check_writable(folder / f"bench-{stamp}.{EXTENSIONS[f]}", f"{f} report") for f in files}


def _infer_format(output: Path | None) -> str | None:
    if output is None:
        return None
    suffix = output.suffix.lower().lstrip(".")
    return {"json": "json", "csv": "csv", "md": "md", "markdown": "md", "html": "html", "htm": "html"}.get(suffix)


def _command_line(params: Mapping[str, Any], formats: tuple[str, ...]) -> str:
    """The command as typed when run as `tracea` (or `python -m tracea_cli`); otherwise (tests, the Python API) the
    options that decide what is measured and reported, as a user would retype them. `params`: the parsed options."""
    import shlex
    import sys

    if sys.argv and Path(sys.argv[0]).name in ("tracea", "__main__.py") and "bench" in sys.argv[1:]:
        return shlex.join(["tracea", *sys.argv[1:]])
    p = dict(params)
    parts = ["tracea", "bench"]
    if p.get("op"):
        parts += [p["op"], f"--m {p['m']}"] + [f"--{x} {p[x]}" for x in ("n", "k") if p.get(x)]
        parts += [f"--dtype {p['dtype']}", f"--layout {p['layout']}"]
    elif p.get("suite") is not None:
        parts.append(f"--suite {shlex.quote(p['suite'])}")
    if p.get("from_file") is not None:
        parts.append(f"--from {p['from_file']}")
    if p.get("baseline", "auto") != "auto":
        parts.append(f"--baseline {p['baseline']}")
    if p.get("no_tune"):
        parts.append("--no-tune")
    elif p.get("tune_budget") is not None:
        parts.append(f"--tune-budget {p['tune_budget']}")
    if p.get("backend", "auto") != "auto":
        parts.append(f"--backend {p['backend']}")
    if p.get("device"):
        parts.append(f"--device {p['device']}")
    if p.get("compare") is not None:
        parts.append(f"--compare {p['compare']}")
    parts += [f"--report {f}" for f in formats if f != "terminal"]
    return " ".join(parts)


def bench_command(
    ctx: typer.Context,
    op: Optional[str] = typer.Argument(None, help="Benchmark one problem of this operation (gemm) instead of a suite."),
    m: Optional[int] = typer.Option(None, "--m", help="One problem: rows of A and C."),
    n: Optional[int] = typer.Option(None, "--n", help="One problem: columns of B and C (default: M)."),
    k: Optional[int] = typer.Option(None, "--k", help="One problem: the reduction size (default: M)."),
    dtype: str = typer.Option("fp32", "--dtype", help="One problem: fp32 | tf32 | fp16 | bf16 | fp64."),
    layout: str = typer.Option("nn", "--layout", help="One problem: nn, or nt (B given as N x K)."),
    suite: Optional[str] = typer.Option(None, "--suite", help="quick | default | FILE (a suite file, see docs/bench.md). Default: default."),
    baseline: str = typer.Option("auto", "--baseline", help="auto | cublas | cudnn | numpy | torch | none. auto: the backend's vendor library."),
    report: Optional[List[str]] = typer.Option(None, "--report", help="terminal | json | csv | md | html; repeatable. Default: terminal."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the one file report here."),
    output_dir: Optional[Path] = typer.Option(None, "--output-dir", help="Write the file reports into this folder (default: <data folder>/reports)."),
    json_out: bool = typer.Option(False, "--json", help="Print the results as JSON on stdout, nothing else."),
    from_file: Optional[Path] = typer.Option(None, "--from", help="Render reports from earlier results (a JSON report) without re-running."),
    compare: Optional[Path] = typer.Option(None, "--compare", help="Compare with earlier results (a JSON report); exit 1 on a significant regression."),
    no_tune: bool = typer.Option(False, "--no-tune", help="Use cached winners only; problems without one have no tuned row."),
    tune_budget: Optional[int] = typer.Option(None, "--tune-budget", help="Evaluations per problem when it is not in the cache (default: 8 on the CPU, 16 on a GPU)."),
    backend: str = typer.Option("auto", "--backend", help="auto | cuda | cpu."),
    device: Optional[str] = typer.Option(None, "--device", help="CUDA device: N (the first of N,M or all is used)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs and of the search."),
) -> None:
    """Benchmark tuned kernels against the vendor library and the measured ceilings.

    The default suite with an HTML report: `tracea bench --report html`. One problem: `tracea bench gemm --m 4096 --dtype bf16`.
    """
    from tracea_cli.bench import results as res
    from tracea_cli.bench.compare import compare_results
    from tracea_cli.cli.output import print_json, stderr_console, stdout_console
    from tracea_cli.config import Settings
    from tracea_cli.files import write_atomic
    from tracea_cli.report import check_formats, render

    settings = Settings.from_env()
    inferred = _infer_format(output) if not report else None
    formats = check_formats(report or ([inferred] if inferred else [] if json_out else ["terminal"]))
    if tune_budget is not None and tune_budget < 1:
        raise UsageError(f"--tune-budget must be at least 1, got {tune_budget}.")
    if tune_budget is not None and no_tune:
        raise UsageError("--tune-budget and --no-tune were both given.", "Leave one out.")
    if op is None and any(x is not None for x in (m, n, k)):
        raise UsageError("--m/--n/--k describe one problem: name its operation too.", "Example: tracea bench gemm --m 4096 --dtype bf16")
    if op is not None and suite is not None:
        raise UsageError("give either one problem (OP and --m) or --suite, not both.")
    if from_file is not None and (op is not None or suite is not None or no_tune or tune_budget is not None
                                  or backend != "auto" or device or baseline != "auto"):
        raise UsageError("--from renders earlier results: it takes no problem, suite, baseline, tuning or device options.", "Leave them out, or drop --from to measure afresh.")
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    paths = _output_paths(formats, output, output_dir, settings.data_dir, stamp)
    old = res.load(compare, what="--compare file") if compare is not None else None
    command = _command_line(ctx.params, formats)
    err = stderr_console()

    if from_file is not None:
        results = res.load(from_file, what="--from file")
    else:
        from tracea_cli.bench.baselines import check_baseline
        from tracea_cli.bench.engine import LiveEngine
        from tracea_cli.bench.runner import BenchRequest

        problem, suite_file, ops = _parse_problems(op, m, n, k, dtype, layout, suite)
        check_baseline(baseline, ops=ops, backend=None)  # all bad input is found before the engine (and a profile) is made
        with LiveEngine(settings, backend=backend, devices=device) as engine:
            engine.check_baseline(baseline, ops)
            chosen = _choose_suite(engine, problem, suite_file, suite)
            request = BenchRequest(suite=chosen, baseline=baseline, tune=not no_tune, tune_budget=tune_budget, seed=seed, command=command)
            results = _run_with_progress(request, engine, err)
    if old is not None:
        results = results.with_comparison(compare_results(old, results, against=str(compare)))

    out = err if json_out else stdout_console()
    if "terminal" in formats:
        from tracea_cli.report.terminal import render_terminal

        render_terminal(results, out)
    for fmt, path in paths.items():
        write_atomic(path, render(fmt, results), f"{fmt} report")
        out.print(f"{fmt} report: {path}", soft_wrap=True)
    if json_out:
        print_json(res.to_dict(results))

    if results.comparison is not None and results.comparison.regressions:
        worst = max(results.comparison.regressions, key=lambda c: c.ratio.estimate)
        raise RunFailed(f"{len(results.comparison.regressions)} significant regression(s) against {compare}; the worst: {worst.problem} / "
                        f"{worst.provider} takes {worst.ratio.estimate:.2f}x the old time.", "See the comparison in the report.")
    failed = [r for r in results.results if not r.ok and r.status != res.SKIPPED]
    if failed and from_file is None:
        raise RunFailed(f"{len(failed)} measurement(s) failed, e.g. {failed[0].problem} / {failed[0].provider}: {failed[0].status}.",
                        "The reports list every failure with its reason.")


def _parse_problems(op, m, n, k, dtype, layout, suite):
    """(one problem or None, a suite file's suite or None, the ops involved), from the command line alone."""
    from tracea_cli.bench.suites import BUILTIN, resolve_suite
    from tracea_cli.ops import check_op
    from tracea_cli.ops.gemm.problem import GemmProblem

    if op is not None:
        check_op(op)
        if m is None:
            raise UsageError("--m is required for one problem (N and K default to M).", "Example: tracea bench gemm --m 4096 --dtype bf16")
        problem = GemmProblem(m, n if n is not None else m, k if k is not None else m, dtype=dtype, layout=layout)
        return problem, None, (problem.op,)
    name = suite or "default"
    if name in BUILTIN:
        return None, None, ("gemm",)
    suite_file = resolve_suite(name, backend="", dtypes=())  # a file: read and checked now
    return None, suite_file, tuple(dict.fromkeys(p.op for p in suite_file.problems))


def _choose_suite(engine, problem, suite_file, suite):
    from tracea_cli.bench.suites import resolve_suite, single

    if problem is not None:
        if problem.dtype not in engine.dtypes():
            raise UsageError(f"the {engine.backend_name} backend does not run {problem.dtype} here (it runs {', '.join(engine.dtypes())}).",
                             "Choose another --dtype, or run on a machine whose GPU supports it.")
        return single(problem)
    return suite_file or resolve_suite(suite or "default", backend=engine.backend_name, dtypes=engine.dtypes())


def _run_with_progress(request, engine, console):
    from tracea_cli.bench.runner import run_bench

    if not console.is_terminal:  # a log file or a pipe: one line per step, with the seconds since the start
        import time

        began = time.monotonic()

        def log(done: int, total: int, message: str) -> None:
            console.print(f"bench [{min(done + 1, total)}/{total}] {time.monotonic() - began:6.1f}s {message}", soft_wrap=True, markup=False)

        return run_bench(request, engine, progress=log)

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(TextColumn("[bold]bench[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}"),
                  console=console, transient=True) as bar:
        task = bar.add_task("starting", total=len(request.suite.problems))

        def progress(done: int, total: int, message: str) -> None:
            bar.update(task, completed=done, description=message[:80])

        return run_bench(request, engine, progress=progress)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench_command)
