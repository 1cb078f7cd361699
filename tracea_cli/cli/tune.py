"""`tracea tune OP`: search the kernel space for the fastest correct configuration, and `--replay` a landscape."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tracea_cli.errors import UsageError

DEFAULT_BUDGET = 40
STRATEGIES = ("bayes", "random", "grid")


def tune_command(
    op: Optional[str] = typer.Argument(None, help="Operation to tune: gemm."),
    m: Optional[int] = typer.Option(None, "--m", help="Rows of A and C."),
    n: Optional[int] = typer.Option(None, "--n", help="Columns of B and C (default: M)."),
    k: Optional[int] = typer.Option(None, "--k", help="The reduction size (default: M)."),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32 | tf32 | fp16 | bf16 | fp64."),
    layout: str = typer.Option("nn", "--layout", help="nn, or nt (B given as N x K, as torch.nn.Linear stores weights)."),
    epilogue: str = typer.Option("none", "--epilogue", help="none | bias | bias_relu | bias_silu | bias_gelu | bias_residual."),
    backend: str = typer.Option("auto", "--backend", help="auto | cuda | cpu | rocm."),
    device: Optional[str] = typer.Option(None, "--device", help="CUDA device: N, N,M or all."),
    strategy: str = typer.Option("bayes", "--strategy", help="bayes | random | grid."),
    budget: int = typer.Option(DEFAULT_BUDGET, "--budget", help="Evaluations, stored trials included."),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", help="Stop the search after this many seconds."),
    seed: int = typer.Option(0, "--seed", help="Seed of the search and of the random inputs."),
    force: bool = typer.Option(False, "--force", help="Start afresh: ignore and replace stored trials for this key."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout, nothing else."),
    replay: Optional[Path] = typer.Option(None, "--replay", help="Search a recorded landscape (Kernel Tuner cache file or a tracea cache export) instead of hardware."),
    repeats: int = typer.Option(30, "--repeats", help="With --replay: seeded repeats, scored against random search."),
    cache: Optional[Path] = typer.Option(None, "--cache", help="Cache folder (default: TRACEA_CACHE_DIR or the user cache)."),
) -> None:
    """Tune OP for one shape: `tracea tune gemm --m 2048` (N and K default to M)."""
    from tracea_cli.cli.output import print_json, stderr_console, stdout_console
    from tracea_cli.config import Settings

    if strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy {strategy!r}.", f"Use one of {', '.join(STRATEGIES)}.")
    if budget < 1:
        raise UsageError(f"--budget must be at least 1, got {budget}.")
    if replay is not None:
        if repeats < 1:
            raise UsageError(f"--repeats must be at least 1, got {repeats}.")
        from tracea_cli.tune.replay import render_replay, run_replay

        result = run_replay(replay, strategy=strategy, budget=budget, repeats=repeats, seed=seed)
        if json_out:
            print_json(result.as_dict())
        else:
            render_replay(result, stdout_console())
        return

    from tracea_cli.ops import check_op
    from tracea_cli.ops.gemm.problem import GemmProblem

    if op is None:
        raise UsageError("name the operation to tune, e.g. `tracea tune gemm --m 2048`.")
    check_op(op)
    if m is None:
        raise UsageError("--m is required (N and K default to M).", "Example: tracea tune gemm --m 2048")
    problem = GemmProblem(m, n if n is not None else m, k if k is not None else m, dtype=dtype, layout=layout, epilogue=epilogue)

    from tracea_cli.tune.driver import TuneRequest, tune

    settings = Settings.from_env()
    if cache is not None:
        from dataclasses import replace

        settings = replace(settings, cache_dir=cache)
    request = TuneRequest(problem, backend=backend, devices=device, strategy=strategy, budget=budget,
                          time_limit_s=time_limit, seed=seed, force=force)
    err = stderr_console()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]tune[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=err, transient=True) as bar:
        task = bar.add_task("starting", total=budget)

        def progress(done: int, total: int, message: str) -> None:
            if message.startswith("warning:"):
                err.print(message)
            bar.update(task, completed=done if total else None, description=message[:70])

        result = tune(request, settings=settings, progress=progress)
    if json_out:
        print_json(result.as_dict())
    else:
        from tracea_cli.tune.render import render_tune

        render_tune(result, stdout_console())


def register(app: typer.Typer) -> None:
    app.command("tune")(tune_command)
