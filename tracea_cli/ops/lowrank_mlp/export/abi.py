"""lowrank-mlp's part of the exported ABI (docs/lowrank-mlp.md, docs/kernel-abi.md): the op header
tracea_lowrank_mlp.h (the argument struct, the enums, the C++ call `tracea::lowrank_mlp`), the slots the launch
tables name, the prefix functions of an export's header, and the example program. The export itself (export/) knows
none of this by name: it reads it here through the op's `export` attribute."""

from __future__ import annotations

from importlib import resources
from typing import Any, Mapping

from tracea_cli import __version__
from tracea_cli.ops.base import ExportAbi
from tracea_cli.ops.dtypes import get_dtype
from tracea_cli.ops.export_example import example_support
from tracea_cli.ops.lowrank_mlp.problem import (
    ACTS,
    INTERMEDIATES,
    LAYOUTS,
    LowrankMlpProblem,
)

HEADER = "tracea_lowrank_mlp.h"
POINTERS = ("x", "U", "V", "bias", "residual", "y", "T", "workspace")
INTS = ("M", "K", "R", "N", "ldt")
_STORAGE = {"fp32": "float", "fp16": "uint16_t", "bf16": "uint16_t", "fp64": "double"}
# the GEMM example's storage-format helpers and driver helpers, which this example shares: (first line, stop line)


def _template(name: str, package: str = "tracea_cli.ops.lowrank_mlp.export") -> str:
    return resources.files(package).joinpath(name).read_text()


def _enums() -> str:
    def enum(tag: str, names: tuple[str, ...]) -> str:
        values = ", ".join(f"TRACEA_LOWRANK_{tag}_{name.upper()} = {i}" for i, name in enumerate(names))
        return f"typedef enum tracea_lowrank_{tag.lower()} {{ {values} }} tracea_lowrank_{tag.lower()};"

    return "\n".join((enum("ACT", ACTS), enum("LAYOUT", LAYOUTS), enum("INTERMEDIATE", INTERMEDIATES)))


def header_text(slots: str) -> str:
    """tracea_lowrank_mlp.h, with the export's generated slot enum and ABI table (`slots`) in place."""
    acts = ",\n".join(f"  {name} = TRACEA_LOWRANK_ACT_{name.upper()}" for name in ACTS)
    middles = ",\n".join(f"  {name} = TRACEA_LOWRANK_INTERMEDIATE_{name.upper()}" for name in INTERMEDIATES)
    return (_template(HEADER).replace("@VERSION@", __version__).replace("@ENUMS@", _enums())
            .replace("@SLOTS@", slots).replace("@CPP_ACTS@", acts).replace("@CPP_INTERMEDIATES@", middles))


def fields(problem: LowrankMlpProblem) -> tuple[int, ...]:
    """The export's other problem fields as tracea_lowrank_mlp.h codes them: act, bias, residual, layout,
    intermediate."""
    p = problem
    return (ACTS.index(p.act), int(p.bias), int(p.residual), LAYOUTS.index(p.layout),
            INTERMEDIATES.index(p.intermediate))


def prefix(problem: LowrankMlpProblem) -> str:
    tail = "" if problem.epilogue == "none" else f"_{problem.epilogue}"
    middle = "_t32" if problem.intermediate == "fp32" else ""
    return f"tracea_lowrank_mlp_{problem.dtype}_{problem.layout}{middle}{tail}"


def api(p: str, staged: bool) -> str:
    """The prefix functions of an export's header (`p` its prefix; `staged`: a variant keeps T in the workspace)."""
    return f"""/* y = act(x.U.V + bias) + residual on `stream`: the device is the stream's (for the default stream, the
 * calling thread's current context's, else device 0). Loads the binaries on first use. Returns TRACEA_OK or the
 * reason it did not launch. */
static inline tracea_status {p}_launch(const tracea_lowrank_mlp_args* args, CUstream stream) {{
  return tracea__lowrank_mlp(&{p}__export, args, stream);
}}

/* Bytes of scratch args.workspace must hold for an (M, d_in, rank, d_out) call: {'T of the two-GEMM kernels' if staged
 else '0 for this export (its kernels keep T on chip)'}. */
static inline size_t {p}_workspace_bytes(int m, int d_in, int rank, int d_out) {{
  return tracea__lowrank_mlp_workspace_bytes(&{p}__export, m, d_in, rank, d_out);
}}"""


def api_summary(p: str) -> str:
    return f""" *   {p}_launch(&args, stream)        y = act(x.U.V + bias) + residual (args: {HEADER})
 *   {p}_workspace_bytes(m, d_in, rank, d_out)  scratch bytes args.workspace needs (0: none)"""


def example(manifest: Mapping[str, Any], c_header: str) -> str:
    """example.cpp: runs the export once on a stream and checks it against a float64 reference computed there."""
    first = manifest["shape"][0]
    dtype = manifest["dtype"]
    flag = {True: "true", False: "false"}
    return (
        _template("example.cpp").replace("@VERSION@", __version__)
        .replace("@SUPPORT@", example_support())
        .replace("@HEADER@", c_header)
        .replace("@DTYPE@", dtype)
        .replace("@LAYOUT@", manifest["layout"])
        .replace("@EPILOGUE@", LowrankMlpProblem.from_key(dtype, {**manifest_fields(manifest), **first}).epilogue)
        .replace("@INTERMEDIATE@", manifest["intermediate"])
        .replace("@ACT@", manifest["act"])
        .replace("@BIAS@", flag[bool(manifest["bias"])])
        .replace("@RESIDUAL@", flag[bool(manifest["residual"])])
        .replace("@STORAGE@", _STORAGE[dtype])
        .replace("@BOUND@", repr(get_dtype(dtype).bound))
        .replace("@NT@", flag[manifest["layout"] == "nt"])
        .replace("@M@", str(first["m"]))
        .replace("@D_IN@", str(first["d_in"]))
        .replace("@RANK@", str(first["rank"]))
        .replace("@D_OUT@", str(first["d_out"]))
    )


def manifest_fields(manifest: Mapping[str, Any]) -> dict[str, Any]:
    return {name: manifest[name] for name in ("act", "bias", "residual", "layout", "intermediate")}


ABI = ExportAbi(
    header=HEADER,
    header_text=header_text,
    slot_prefix="TRACEA_LOWRANK_MLP_",
    pointers=POINTERS,
    ints=INTS,
    workspace="workspace",
    grid_sizes=("M", "N", "K"),
    dispatch=("M", "K", "R", "N"),
    tensors=(("x", None), ("U", None), ("V", None), ("bias", None), ("residual", None), ("y", None)),
    fields=fields,
    prefix=prefix,
    api=api,
    api_summary=api_summary,
    example=example,
)
