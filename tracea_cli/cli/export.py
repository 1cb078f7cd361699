"""`tracea export OP`: the tuned winner (or a given configuration) as cubins, PTX, C/C++ headers and an example. One
subcommand per op; its size options repeat to export several tuned shapes together (they dispatch by shape)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

import typer

from tracea_cli.cli.op_commands import Flag, build_command, op_flags, op_group
from tracea_cli.errors import UsageError

EXPORT_FLAGS = (
    Flag("shapes", Optional[str], None, "--shapes", "Several shapes at once: sizes joined by x, shapes by commas "
                                                    "(for gemm: MxNxK,MxNxK,...)."),
    Flag("backend", str, "cuda", "--backend", "cuda (the only backend with an export)."),
    Flag("arch", Optional[str], None, "--arch", "Architectures to build for: sm_80,sm_86,sm_89,sm_90,sm_90a,..."),
    Flag("out", Optional[Path], None, "--out", "Folder to write (new, empty, or an earlier export to replace)."),
    Flag("config", Optional[str], None, "--config", "FILE (JSON configuration) or `default`; default: the tuning cache's winner."),
    Flag("cache", Optional[Path], None, "--cache", "Cache folder (default: TRACEA_CACHE_DIR or the user cache)."),
    Flag("json_out", bool, False, "--json", "Print the result as JSON on stdout, nothing else."),
)


def shape_values(op: Any, values: dict[str, Any], shapes: str | None) -> list[dict[str, Any]]:
    """The op's option values per exported shape: from --shapes (the op's sizes joined by x, shapes by commas), or
    from repeated size options, each given once (the same for every shape), as often as the others, or not at all."""
    sizes = [o for o in op.options if o.size]
    common = {o.name: values[o.name] for o in op.options if not o.size and values.get(o.name) is not None}
    given = {o.name: list(values.get(o.name) or []) for o in sizes}
    if shapes is not None:
        if any(given.values()):
            raise UsageError(f"give the shapes either with --shapes or with {', '.join(o.flag for o in sizes)}, not both.")
        pattern = r"\s*" + "x".join([r"(\d+)"] * len(sizes)) + r"\s*"
        out = []
        for part in shapes.split(","):
            m = re.fullmatch(pattern, part)
            if not m:
                form = "x".join(o.name.upper() for o in sizes)
                raise UsageError(f"--shapes takes {form},{form},...; {part.strip()!r} is not {form}.")
            out.append({**common, **{o.name: int(v) for o, v in zip(sizes, m.groups())}})
        return out
    count = max((len(v) for v in given.values()), default=0)
    if count == 0:
        required = [o.flag for o in sizes if o.required]
        raise UsageError(f"{' and '.join(required) or 'a size'} (or --shapes) is required.",
                         f"Example: tracea export {op.name} {' '.join(f'{f} ...' for f in required)} --arch sm_90 --out DIR")
    for name, v in given.items():
        if len(v) not in (0, 1, count):
            flag = next(o.flag for o in sizes if o.name == name)
            raise UsageError(f"{flag} was given {len(v)} times for {count} shapes.",
                             f"Give {flag} once, once per shape, or not at all (it then takes its default).")
    return [{**common, **{name: (v[0] if len(v) == 1 else v[i]) for name, v in given.items() if v}} for i in range(count)]


def _export_op(op: Any, values: dict[str, Any]) -> None:
    from dataclasses import replace

    from tracea_cli.cli.output import print_json, stderr_console, stdout_console
    from tracea_cli.config import Settings
    from tracea_cli.export.writer import ExportRequest, export

    if values["arch"] is None:
        raise UsageError("--arch is required: name the GPU architectures to build for.", "Example: --arch sm_80,sm_90")
    if values["out"] is None:
        raise UsageError("--out is required: the folder to write the export to.")
    problems = tuple(op.problem(**v) for v in shape_values(op, values, values["shapes"]))
    settings = Settings.from_env()
    if values["cache"] is not None:
        settings = replace(settings, cache_dir=values["cache"])
    request = ExportRequest(problems=problems, archs=tuple(a for a in values["arch"].split(",") if a.strip()),
                            out=values["out"], config=values["config"], backend=values["backend"])
    err = stderr_console()
    with err.status("compiling with NVRTC", spinner="dots"):
        result = export(request, settings=settings)
    for warning in result.warnings:
        err.print(f"warning: {warning}", markup=False, highlight=False)
    if values["json_out"]:
        print_json(result.as_dict())
    else:
        from tracea_cli.export.render import render_export

        render_export(result, stdout_console())


def op_command(op: Any):
    example = " ".join(f"{o.flag} ..." for o in op.options if o.required)
    return build_command(op.name, f"Export {op.name} as cubins + PTX + C/C++ headers: `tracea export {op.name} {example} "
                                  "--arch sm_80,sm_90 --out DIR`.",
                         [*op_flags(op, repeat_sizes=True), *EXPORT_FLAGS], lambda **values: _export_op(op, values), op=op)


export_app = typer.Typer(cls=op_group(op_command), no_args_is_help=True,
                         help="Export an op's tuned winners as ready-to-use binaries: `tracea export gemm --m 2048 "
                              "--dtype fp16 --arch sm_80,sm_90 --out DIR`.")


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")
