"""The terminal view of an export (rich). Computing happens in writer.py; this only draws."""

from __future__ import annotations

from tracea_cli.export.manifest import shape_label
from tracea_cli.export.writer import ExportResult
from tracea_cli.space import config_key


def render_export(result: ExportResult, console) -> None:
    from rich.table import Table

    doc = result.manifest
    console.print(f"[bold]exported {result.label}[/] to {result.out}")
    table = Table(show_edge=False)
    for col in ("shape", "arch", "configuration", "origin", "verification", "measured"):
        table.add_column(col, overflow="fold")
    measured = {(shape_label(m["shape"]), m["arch"]): m for m in doc["measurement"] or []}
    checks = {(shape_label(v["shape"]), v["arch"]): v for v in doc["verification"]}
    for c in doc["config"]:
        where = (shape_label(c["shape"]), c["arch"])
        v = checks[where]
        status = (f"verified on {v['device']} (error {v['rel_error']:.2g})" if v["status"] == "verified"
                  else "[yellow]compiled-only[/]")
        m = measured.get(where)
        time_text = f"{m['median_ms']:.4f} ms ±{m['cv']:.1%}" if m else "-"
        table.add_row(where[0], where[1], config_key(c["values"]), c["origin"], status, time_text)
    console.print(table)
    ptx = doc["ptx"]["files"]
    console.print(f"PTX: {', '.join(p['arch'] for p in ptx) if ptx else 'none'}; needs a CUDA {doc['requires']['min_driver']} "
                  f"driver or newer; NVRTC {doc['toolchain']['nvrtc']}, PTX ISA {doc['toolchain']['ptx_isa']}")
    console.print(f"{len(result.files)} files: {doc['files']['c_header']} (C), {doc['files']['op_header']} (the op's C and "
                  f"C++ calls), {doc['files']['cpp_header']} (C++), "
                  f"{doc['files']['example']} + {doc['files']['cmake']} (example), manifest.json, kernels/")
