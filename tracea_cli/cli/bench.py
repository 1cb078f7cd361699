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

from tracea_cli.cli.op_commands import Flag, build_command, group_options_after_op, op_flags, op_group, op_values
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
    if output_dir is not None and output_dir.exists() and not output_dir.is_dir():
        raise UsageError(f"--output-dir {output_dir} is a file, not a folder.", "Give a folder for the reports (it is made when missing).")
    if output_dir is not None and not files:
        raise UsageError("--output-dir was given, but only the terminal report was asked for.",
                         "Add --report json|csv|md|html (repeatable) for the files to write there.")
    folder = output_dir if output_dir is not None else data_dir / "reports"
    return {f: check_writable(folder / f"bench-{stamp}.{EXTENSIONS[f]}", f"{f} report") for f in files}


def _infer_format(output: Path | None) -> str | None:
    if output is None:
        return None
    suffix = output.suffix.lower().lstrip(".")
    return {"json": "json", "csv": "csv", "md": "md", "markdown": "md", "html": "html", "htm": "html"}.get(suffix)


def _command_line(op: Any, params: Mapping[str, Any], formats: tuple[str, ...]) -> str:
    """The command as typed when run as `tracea` (or `python -m tracea_cli`); otherwise (tests, the Python API) the
    options that decide what is measured and reported, as a user would retype them. `params`: the parsed options."""
    import shlex
    import sys

    if sys.argv and Path(sys.argv[0]).name in ("tracea", "__main__.py") and "bench" in sys.argv[1:]:
        return shlex.join(["tracea", *sys.argv[1:]])
    p = dict(params)
    parts = ["tracea", "bench"]
    if op is not None:
        parts.append(op.name)
        parts += [o.argument(p[o.name]) for o in op.options if p.get(o.name) not in (None, o.default)]
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


RUN_FLAGS = (
    Flag("baseline", str, "auto", "--baseline",
         "auto (the op's default library on the backend: cuBLAS, numpy, ...), none, or one of the op's baselines."),
    Flag("report", Optional[List[str]], None, "--report", "terminal | json | csv | md | html; repeatable. Default: terminal."),
    Flag("output", Optional[Path], None, "--output", "Write the one file report here."),
    Flag("output_dir", Optional[Path], None, "--output-dir", "Write the file reports into this folder (default: <data folder>/reports)."),
    Flag("json_out", bool, False, "--json", "Print the results as JSON on stdout, nothing else."),
    Flag("compare", Optional[Path], None, "--compare", "Compare with earlier results (a JSON report); exit 1 on a significant regression."),
    Flag("no_tune", bool, False, "--no-tune", "Use cached winners only; problems without one have no tuned row."),
    Flag("tune_budget", Optional[int], None, "--tune-budget", "Evaluations per problem when it is not in the cache (default: 8 on the CPU, 16 on a GPU)."),
    Flag("backend", str, "auto", "--backend", "auto | cuda | cpu."),
    Flag("device", Optional[str], None, "--device", "CUDA device: N (the first of N,M or all is used)."),
    Flag("seed", int, 0, "--seed", "Seed of the random inputs and of the search."),
    Flag("executor", str, "local", "--executor", "local | ray: where the tuning evaluations run (docs/distributed.md)."),
    Flag("ray_address", Optional[str], None, "--ray-address", "With --executor ray: auto or HOST:PORT of the head."),
)
SUITE_FLAGS = (
    Flag("suite", Optional[str], None, "--suite", "quick | default | an op's own suite (gemm, ...) | full | FILE (a suite file, see docs/bench.md). Default: default."),
    Flag("from_file", Optional[Path], None, "--from", "Render reports from earlier results (a JSON report) without re-running."),
)
DEFAULTS = {f.name: f.default for f in (*RUN_FLAGS, *SUITE_FLAGS)}


def run_bench_command(op: Any, values: Mapping[str, Any]) -> None:
    """Benchmark one op's problem (`op` and its option values) or, with `op` None, a suite (or render --from)."""
    from tracea_cli.bench import results as res
    from tracea_cli.bench.compare import compare_results
    from tracea_cli.cli.output import print_json, stderr_console, stdout_console
    from tracea_cli.config import Settings
    from tracea_cli.files import write_atomic
    from tracea_cli.report import check_formats, render

    v = {**DEFAULTS, **values}
    output, json_out, compare, from_file, suite = v["output"], v["json_out"], v["compare"], v["from_file"], v["suite"]
    settings = Settings.from_env()
    inferred = _infer_format(output) if not v["report"] else None
    formats = check_formats(v["report"] or ([inferred] if inferred else [] if json_out else ["terminal"]))
    if v["tune_budget"] is not None and v["tune_budget"] < 1:
        raise UsageError(f"--tune-budget must be at least 1, got {v['tune_budget']}.")
    if v["tune_budget"] is not None and v["no_tune"]:
        raise UsageError("--tune-budget and --no-tune were both given.", "Leave one out.")
    if from_file is not None and (suite is not None or v["no_tune"] or v["tune_budget"] is not None
                                  or v["backend"] != "auto" or v["device"] or v["baseline"] != "auto"):
        raise UsageError("--from renders earlier results: it takes no suite, baseline, tuning or device options.", "Leave them out, or drop --from to measure afresh.")
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    paths = _output_paths(formats, output, v["output_dir"], settings.data_dir, stamp)
    old = res.load(compare, what="--compare file") if compare is not None else None
    command = _command_line(op, v, formats)
    err = stderr_console()

    if from_file is not None:
        results = res.load(from_file, what="--from file")
    else:
        from tracea_cli.bench.baselines import check_baseline
        from tracea_cli.bench.engine import LiveEngine
        from tracea_cli.bench.runner import BenchRequest

        problem, suite_file, ops = _parse_problems(op, v, suite)
        check_baseline(v["baseline"], ops=ops, backend=None)  # all bad input is found before the engine (and a profile) is made
        from tracea_cli.tune.executor import check_executor

        check_executor(v["executor"], v["ray_address"])
        with LiveEngine(settings, backend=v["backend"], devices=v["device"], executor=v["executor"],
                        ray_address=v["ray_address"]) as engine:
            engine.check_baseline(v["baseline"], ops)
            chosen = _choose_suite(engine, problem, suite_file, suite)
            request = BenchRequest(suite=chosen, baseline=v["baseline"], tune=not v["no_tune"], tune_budget=v["tune_budget"],
                                   seed=v["seed"], command=command)
            results = _run_with_progress(request, engine, err)
    if old is not None:
        results = results.with_comparison(compare_results(old, results, against=str(compare)))

    out = err if json_out else stdout_console()
    if "terminal" in formats:
        from tracea_cli.report.terminal import render_terminal

        render_terminal(results, out)
    json_file = paths["json"].name if "json" in paths else None
    for fmt, path in paths.items():
        write_atomic(path, render(fmt, results, json_file=json_file), f"{fmt} report")
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


def _parse_problems(op: Any, values: Mapping[str, Any], suite: str | None):
    """(one problem or None, a suite file's suite or None, the ops involved), from the command line alone."""
    from tracea_cli.bench.suites import builtin_names, check_suite_name, resolve_suite
    from tracea_cli.ops.registry import op_names

    if op is not None:
        problem = op.problem(**op_values(op, dict(values)))
        return problem, None, (problem.op,)
    name = "default" if suite is None else suite
    check_suite_name(name)
    if name in builtin_names():
        return None, None, tuple(op_names()) if name in ("quick", "default", "full") else (name,)
    suite_file = resolve_suite(name, backend="", dtypes=())  # a file: read and checked now
    return None, suite_file, tuple(dict.fromkeys(p.op for p in suite_file.problems))


def _choose_suite(engine, problem, suite_file, suite):
    from tracea_cli.bench.suites import resolve_suite, single

    if problem is not None:
        reason = engine.unsupported(problem)
        if reason:
            raise UsageError(f"{reason}.", "Choose another dtype, or run on a machine whose GPU supports it.")
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

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]bench[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}"),
                  console=console, transient=True) as bar:
        task = bar.add_task("starting", total=len(request.suite.problems))

        def progress(done: int, total: int, message: str) -> None:
            bar.update(task, completed=done, description=message[:80])

        return run_bench(request, engine, progress=progress)


def op_command(op: Any):
    """`tracea bench OP`: one problem of the op, against its baseline."""
    example = " ".join(f"{o.flag} ..." for o in op.options if o.required)
    return build_command(op.name, f"Benchmark one {op.name} problem: `tracea bench {op.name} {example}`.",
                         [*op_flags(op), *RUN_FLAGS], lambda **values: run_bench_command(op, values), op=op)


def _group_command() -> Any:
    """The `tracea bench` group: its callback runs a suite when no op is named."""
    def callback(ctx: typer.Context, **values: Any) -> None:
        given = {k: v for k, v in values.items()}
        group_options_after_op(ctx, given, DEFAULTS)
        if ctx.invoked_subcommand is None:
            run_bench_command(None, values)

    import inspect

    params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)]
    params += [f.parameter() for f in (*SUITE_FLAGS, *RUN_FLAGS)]
    callback.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    callback.__annotations__ = {p.name: p.annotation for p in params}
    return callback


bench_app = typer.Typer(cls=op_group(op_command), invoke_without_command=True,
                        help="Benchmark tuned kernels against the vendor library and the measured ceilings. The default "
                             "suite with an HTML report: `tracea bench --report html`; one problem: `tracea bench gemm "
                             "--m 4096 --dtype bf16`.")
bench_app.callback()(_group_command())


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
