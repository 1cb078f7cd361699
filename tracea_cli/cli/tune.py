"""`tracea tune OP`: search the kernel space of one op's problem for the fastest correct configuration; `tracea tune
--replay FILE` searches a recorded landscape instead. One subcommand per op (cli/op_commands.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from tracea_cli.cli.op_commands import Flag, build_command, group_options_after_op, op_flags, op_group, op_values
from tracea_cli.errors import UsageError

DEFAULT_BUDGET = 40
STRATEGIES = ("bayes", "random", "grid")

TUNE_FLAGS = (
    Flag("backend", str, "auto", "--backend", "auto | cuda | cpu | rocm."),
    Flag("device", Optional[str], None, "--device", "CUDA device: N, N,M or all."),
    Flag("strategy", str, "bayes", "--strategy", "bayes | random | grid."),
    Flag("budget", int, DEFAULT_BUDGET, "--budget", "Evaluations, stored trials included."),
    Flag("time_limit", Optional[float], None, "--time-limit", "Stop the search after this many seconds."),
    Flag("seed", int, 0, "--seed", "Seed of the search and of the random inputs."),
    Flag("force", bool, False, "--force", "Start afresh: ignore and replace stored trials for this key."),
    Flag("json_out", bool, False, "--json", "Print the result as JSON on stdout, nothing else."),
    Flag("cache", Optional[Path], None, "--cache", "Cache folder (default: TRACEA_CACHE_DIR or the user cache)."),
    Flag("executor", str, "local", "--executor", "local (this machine's workers) | ray (one actor per GPU of a Ray cluster)."),
    Flag("ray_address", Optional[str], None, "--ray-address", "With --executor ray: auto or HOST:PORT of the head (default: auto)."),
)


def check_search(strategy: str, budget: int) -> None:
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy {strategy!r}.", f"Use one of {', '.join(STRATEGIES)}.")
    if budget < 1:
        raise UsageError(f"--budget must be at least 1, got {budget}.")


def _tune_op(op: Any, values: dict[str, Any]) -> None:
    from dataclasses import replace

    from tracea_cli.cli.output import print_json, stderr_console, stdout_console
    from tracea_cli.config import Settings
    from tracea_cli.tune.driver import TuneRequest, tune

    check_search(values["strategy"], values["budget"])
    problem = op.problem(**op_values(op, values))
    settings = Settings.from_env()
    if values["cache"] is not None:
        settings = replace(settings, cache_dir=values["cache"])
    request = TuneRequest(problem, backend=values["backend"], devices=values["device"], strategy=values["strategy"],
                          budget=values["budget"], time_limit_s=values["time_limit"], seed=values["seed"],
                          force=values["force"], executor=values["executor"], ray_address=values["ray_address"])
    err = stderr_console()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]tune[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=err, transient=True) as bar:
        task = bar.add_task("starting", total=values["budget"])

        def progress(done: int, total: int, message: str) -> None:
            if message.startswith("warning:"):
                err.print(message)
            bar.update(task, completed=done if total else None, description=message[:70])

        result = tune(request, settings=settings, progress=progress)
    if values["json_out"]:
        print_json(result.as_dict())
    else:
        from tracea_cli.tune.render import render_tune

        render_tune(result, stdout_console())


def op_command(op: Any):
    """`tracea tune OP`: the op's options, then the search's."""
    example = " ".join(f"{o.flag} ..." for o in op.options if o.required)
    return build_command(op.name, f"Tune {op.name}: {op.summary} (`tracea tune {op.name} {example}`)",
                         [*op_flags(op), *TUNE_FLAGS], lambda **values: _tune_op(op, values), op=op)


tune_app = typer.Typer(cls=op_group(op_command), invoke_without_command=True, no_args_is_help=False,
                       help="Tune one op's problem for this machine (`tracea tune gemm --m 2048`), or search a recorded "
                            "landscape (`tracea tune --replay FILE`).")

REPLAY_DEFAULTS = {"replay": None, "strategy": "bayes", "budget": DEFAULT_BUDGET, "repeats": 30, "seed": 0,
                   "json_out": False}


@tune_app.callback()
def tune_callback(
    ctx: typer.Context,
    replay: Optional[Path] = typer.Option(None, "--replay", help="Search a recorded landscape (Kernel Tuner cache file or a tracea cache export) instead of hardware."),
    strategy: str = typer.Option("bayes", "--strategy", help="With --replay: bayes | random | grid."),
    budget: int = typer.Option(DEFAULT_BUDGET, "--budget", help="With --replay: evaluations per repeat."),
    repeats: int = typer.Option(30, "--repeats", help="With --replay: seeded repeats, scored against random search."),
    seed: int = typer.Option(0, "--seed", help="With --replay: the first seed."),
    json_out: bool = typer.Option(False, "--json", help="With --replay: print the result as JSON on stdout."),
) -> None:
    given = {"replay": replay, "strategy": strategy, "budget": budget, "repeats": repeats, "seed": seed,
             "json_out": json_out}
    group_options_after_op(ctx, given, REPLAY_DEFAULTS)
    if ctx.invoked_subcommand is not None:
        return
    if replay is None:
        from tracea_cli.ops.registry import op_names

        raise UsageError("name the operation to tune, e.g. `tracea tune gemm --m 2048`, or give --replay FILE.",
                         f"Operations: {', '.join(op_names())}.")
    from tracea_cli.cli.output import print_json, stdout_console
    from tracea_cli.tune.replay import render_replay, run_replay

    check_search(strategy, budget)
    if repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {repeats}.")
    result = run_replay(replay, strategy=strategy, budget=budget, repeats=repeats, seed=seed)
    if json_out:
        print_json(result.as_dict())
    else:
        render_replay(result, stdout_console())


def register(app: typer.Typer) -> None:
    app.add_typer(tune_app, name="tune")
