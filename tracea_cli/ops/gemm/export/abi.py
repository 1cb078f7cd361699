"""GEMM's part of the exported ABI (docs/kernel-abi.md, docs/export.md): the op header tracea_gemm.h (the argument
struct, the enums, the C++ call `tracea::gemm`), the slots the launch tables name, the prefix functions of an
export's header, and the example program. The export itself (export/) knows none of this by name: it reads it here
through the op's `export` attribute."""

from __future__ import annotations

from importlib import resources
from typing import Any, Mapping

from tracea_cli import __version__
from tracea_cli.ops.export_example import example_support
from tracea_cli.ops.base import ExportAbi
from tracea_cli.ops.dtypes import get_dtype
from tracea_cli.ops.gemm.problem import EPILOGUES, LAYOUTS, GemmProblem

HEADER = "tracea_gemm.h"
POINTERS = ("A", "B", "C", "bias", "residual", "workspace", "A_staged", "B_staged")
INTS = ("M", "N", "K", "lda", "ldb", "ldc", "lda_staged", "ldb_staged")
_STORAGE = {"fp32": "float", "tf32": "float", "fp16": "uint16_t", "bf16": "uint16_t", "fp64": "double"}


def _template(name: str) -> str:
    return resources.files("tracea_cli.ops.gemm.export").joinpath(name).read_text()


def _enums() -> str:
    layouts = ", ".join(f"TRACEA_LAYOUT_{name.upper()} = {i}" for i, name in enumerate(LAYOUTS))
    epilogues = ", ".join(f"TRACEA_EPILOGUE_{e.name.upper()} = {e.code}" for e in EPILOGUES)
    return (f"typedef enum tracea_layout {{ {layouts} }} tracea_layout;\n\n"
            f"typedef enum tracea_epilogue {{\n  {epilogues}\n}} tracea_epilogue;")


def header_text(slots: str) -> str:
    """tracea_gemm.h, with the export's generated slot enum and ABI table (`slots`) in place."""
    cpp = ",\n".join(f"  {e.name} = TRACEA_EPILOGUE_{e.name.upper()}" for e in EPILOGUES)
    return (_template(HEADER).replace("@VERSION@", __version__).replace("@ENUMS@", _enums())
            .replace("@SLOTS@", slots).replace("@CPP_EPILOGUES@", cpp))


def fields(problem: GemmProblem) -> tuple[int, ...]:
    """The export's other problem fields as tracea_gemm.h codes them: layout, epilogue."""
    return LAYOUTS.index(problem.layout), problem.fused.code


def prefix(problem: GemmProblem) -> str:
    tail = "" if problem.epilogue == "none" else f"_{problem.epilogue}"
    return f"tracea_{problem.op}_{problem.dtype}_{problem.layout}{tail}"


def api(p: str, staged: bool) -> str:
    """The prefix functions of an export's header (`p` its prefix; `staged` when a variant stages an operand)."""
    return f"""/* C = epilogue(A.B) on `stream`: the device is the stream's (for the default stream, the calling thread's current
 * context's, else device 0). Loads the binaries on first use. Returns TRACEA_OK or the reason it did not launch. */
static inline tracea_status {p}_launch(const tracea_gemm_args* args, CUstream stream) {{
  return tracea__gemm(&{p}__export, args, stream);
}}

/* Bytes of scratch args.workspace must hold for an M x N x K call (0 when no kernel of this export needs any):
 * the split-K partial sums and the staged copies of A and B (docs/kernel-abi.md, "Staging"). */
static inline size_t {p}_workspace_bytes_mnk(int m, int n, int k) {{
  return tracea__gemm_workspace_bytes(&{p}__export, m, n, k);
}}

/* The M x N part of {p}_workspace_bytes_mnk (split-K only), kept for programs written before staging: exports whose
 * manifest lists `scratch` buffers{' (this one does)' if staged else ''} need {p}_workspace_bytes_mnk. */
static inline size_t {p}_workspace_bytes(int m, int n) {{
  return tracea__gemm_workspace_bytes(&{p}__export, m, n, 0);
}}"""


def api_summary(p: str) -> str:
    return f""" *   {p}_launch(&args, stream)        C = A.B on `stream` (see tracea_gemm_args in {HEADER})
 *   {p}_workspace_bytes_mnk(m, n, k) scratch bytes args.workspace needs (0: none)
 *   {p}_workspace_bytes(m, n)        the same without K: enough only for exports that stage no operand"""


def example(manifest: Mapping[str, Any], c_header: str) -> str:
    """example.cpp: runs the export once on a stream and checks it against a float64 reference computed there."""
    first = manifest["shape"][0]
    dtype = manifest["dtype"]
    return (
        _template("example.cpp").replace("@SUPPORT@", example_support()).replace("@VERSION@", __version__)
        .replace("@HEADER@", c_header)
        .replace("@DTYPE@", dtype)
        .replace("@LAYOUT@", manifest["layout"])
        .replace("@EPILOGUE@", manifest["epilogue"])
        .replace("@STORAGE@", _STORAGE[dtype])
        .replace("@BOUND@", repr(get_dtype(dtype).bound))
        .replace("@NT@", "true" if manifest["layout"] == "nt" else "false")
        .replace("@M@", str(first["m"]))
        .replace("@N@", str(first["n"]))
        .replace("@K@", str(first["k"]))
    )


ABI = ExportAbi(
    header=HEADER,
    header_text=header_text,
    slot_prefix="TRACEA_GEMM_",
    pointers=POINTERS,
    ints=INTS,
    workspace="workspace",
    grid_sizes=("M", "N", "K"),
    dispatch=("M", "N", "K"),
    tensors=(("A", "lda"), ("B", "ldb"), ("C", "ldc"), ("bias", None), ("residual", None)),
    fields=fields,
    prefix=prefix,
    api=api,
    api_summary=api_summary,
    example=example,
)
