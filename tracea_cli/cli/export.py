"""`tracea export OP`: the tuned winner (or a given configuration) as cubins, PTX, C/C++ headers and an example."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional

import typer

from tracea_cli.errors import UsageError


def parse_shapes(ms: list[int], ns: list[int], ks: list[int], shapes: str | None) -> list[tuple[int, int, int]]:
    """(M, N, K) per exported shape, from --shapes MxNxK,... or from repeated --m (with --n/--k once or as often)."""
    if shapes is not None:
        if ms or ns or ks:
            raise UsageError("give the shapes either with --shapes or with --m/--n/--k, not both.")
        out = []
        for part in shapes.split(","):
            m = re.fullmatch(r"\s*(\d+)x(\d+)x(\d+)\s*", part)
            if not m:
                raise UsageError(f"--shapes takes MxNxK,MxNxK,...; {part.strip()!r} is not MxNxK.",
                                 "Example: --shapes 2048x2048x2048,4096x4096x4096")
            out.append((int(m[1]), int(m[2]), int(m[3])))
        return out
    if not ms:
        raise UsageError("--m (or --shapes) is required.", "Example: tracea export gemm --m 2048 --arch sm_90 --out DIR")
    for name, values in (("--n", ns), ("--k", ks)):
        if len(values) not in (0, 1, len(ms)):
            raise UsageError(f"{name} was given {len(values)} times for {len(ms)} --m values.",
                             f"Give {name} once, once per --m, or not at all (it then equals M).")

    def pick(values: list[int], i: int, default: int) -> int:
        return default if not values else values[0] if len(values) == 1 else values[i]

    return [(m, pick(ns, i, m), pick(ks, i, m)) for i, m in enumerate(ms)]


def export_command(
    op: str = typer.Argument(..., help="Operation to export: gemm."),
    m: List[int] = typer.Option([], "--m", help="Rows of A and C; repeat for several tuned shapes."),
    n: List[int] = typer.Option([], "--n", help="Columns of B and C (default: M)."),
    k: List[int] = typer.Option([], "--k", help="The reduction size (default: M)."),
    shapes: Optional[str] = typer.Option(None, "--shapes", help="Several shapes at once: MxNxK,MxNxK,..."),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32 | tf32 | fp16 | bf16 | fp64."),
    layout: str = typer.Option("nn", "--layout", help="nn, or nt (B given as N x K)."),
    epilogue: str = typer.Option("none", "--epilogue", help="none | bias | bias_relu | bias_silu | bias_gelu | bias_residual."),
    backend: str = typer.Option("cuda", "--backend", help="cuda (the only backend with an export)."),
    arch: Optional[str] = typer.Option(None, "--arch", help="Architectures to build for: sm_80,sm_86,sm_89,sm_90,sm_90a,..."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder to write (new, empty, or an earlier export to replace)."),
    config: Optional[str] = typer.Option(None, "--config", help="FILE (JSON configuration) or `default`; default: the tuning cache's winner."),
    cache: Optional[Path] = typer.Option(None, "--cache", help="Cache folder (default: TRACEA_CACHE_DIR or the user cache)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout, nothing else."),
) -> None:
    """Export OP as cubins + PTX + C/C++ headers: `tracea export gemm --m 2048 --dtype fp16 --arch sm_80,sm_90 --out DIR`."""
    from tracea_cli.cli.output import print_json, stderr_console, stdout_console
    from tracea_cli.config import Settings
    from tracea_cli.ops import check_op
    from tracea_cli.ops.gemm.problem import GemmProblem

    check_op(op)
    if arch is None:
        raise UsageError("--arch is required: name the GPU architectures to build for.", "Example: --arch sm_80,sm_90")
    if out is None:
        raise UsageError("--out is required: the folder to write the export to.")
    problems = tuple(GemmProblem(mm, nn, kk, dtype=dtype, layout=layout, epilogue=epilogue)
                     for mm, nn, kk in parse_shapes(list(m), list(n), list(k), shapes))
    settings = Settings.from_env()
    if cache is not None:
        from dataclasses import replace

        settings = replace(settings, cache_dir=cache)

    from tracea_cli.export.writer import ExportRequest, export

    request = ExportRequest(problems=problems, archs=tuple(a for a in arch.split(",") if a.strip()), out=out,
                            config=config, backend=backend)
    err = stderr_console()
    with err.status("compiling with NVRTC", spinner="dots"):
        result = export(request, settings=settings)
    for warning in result.warnings:
        err.print(f"warning: {warning}", markup=False, highlight=False)
    if json_out:
        print_json(result.as_dict())
    else:
        from tracea_cli.export.render import render_export

        render_export(result, stdout_console())


def register(app: typer.Typer) -> None:
    app.command("export")(export_command)
