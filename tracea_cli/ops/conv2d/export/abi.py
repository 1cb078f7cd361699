"""conv2d's part of the exported ABI (docs/conv2d.md, "Export"): the op header tracea_conv2d.h (the argument struct, the
epilogue enum, the C++ call `tracea::conv2d`), the slots the launch tables name, the prefix functions of an export's
header and the example program. The export itself (export/) reads it through the op's `export` attribute.

An export serves the geometry and epilogue it was tuned for (its `fields`: stride, padding and dilation per axis,
then the epilogue's code); the sizes N, H, W, C, K, R, S dispatch between its variants. The grid rules read the
implicit GEMM's M = N·P·Q, N = K and K = R·S·C, which the header computes from the sizes and the geometry."""

from __future__ import annotations

from importlib import resources
from typing import Any, Mapping

from tracea_cli import __version__
from tracea_cli.ops.base import ExportAbi
from tracea_cli.ops.conv2d.problem import EPILOGUES, GEOMETRY, Conv2dProblem
from tracea_cli.ops.dtypes import get_dtype
from tracea_cli.ops.export_example import example_support

HEADER = "tracea_conv2d.h"
# the kernels' parameter names (families/implicit_gemm.py): the tensors, the transposes' sources, the workspace
POINTERS = ("X", "filter", "Y", "bias", "residual", "workspace", "X_nchw", "filter_kcrs")
INTS = ("M", "N", "K", "batch", "in_h", "in_w", "in_c", "out_c", "flt_r", "flt_s", "x_is_nchw", "filter_is_kcrs")
_STORAGE = {"fp32": "float", "tf32": "float", "fp16": "uint16_t", "bf16": "uint16_t"}


def _template(name: str) -> str:
    return resources.files("tracea_cli.ops.conv2d.export").joinpath(name).read_text()


def _enums() -> str:
    epilogues = ", ".join(f"TRACEA_CONV2D_EPILOGUE_{e.name.upper()} = {e.code}" for e in EPILOGUES)
    return f"typedef enum tracea_conv2d_epilogue {{\n  {epilogues}\n}} tracea_conv2d_epilogue;"


def header_text(slots: str) -> str:
    """tracea_conv2d.h, with the export's generated slot enum and ABI table (`slots`) in place."""
    cpp = ",\n".join(f"  {e.name} = TRACEA_CONV2D_EPILOGUE_{e.name.upper()}" for e in EPILOGUES)
    return (_template(HEADER).replace("@VERSION@", __version__).replace("@ENUMS@", _enums())
            .replace("@SLOTS@", slots).replace("@CPP_EPILOGUES@", cpp))


def fields(problem: Conv2dProblem) -> tuple[int, ...]:
    """The export's geometry and epilogue as tracea_conv2d.h codes them (TRACEA_CONV2D_FIELD_*)."""
    return (*(int(getattr(problem, g)) for g in GEOMETRY), problem.fused.code)


def _pair(a: int, b: int) -> str:
    return str(a) if a == b else f"{a}x{b}"


def prefix(problem: Conv2dProblem) -> str:
    """tracea_conv2d_fp16_s1_p1_d1[_bias_relu]: the dtype, the geometry (one value where both axes agree), the
    epilogue."""
    p = problem
    geometry = (f"s{_pair(p.stride_h, p.stride_w)}_p{_pair(p.pad_h, p.pad_w)}_"
                f"d{_pair(p.dilation_h, p.dilation_w)}")
    tail = "" if p.epilogue == "none" else f"_{p.epilogue}"
    return f"tracea_{p.op}_{p.dtype}_{geometry}{tail}"


def api(p: str, staged: bool) -> str:
    """The prefix functions of an export's header (`p` its prefix; conv2d's variants stage nothing)."""
    return f"""/* Y = epilogue(conv(X, W)) on `stream`: the device is the stream's (for the default stream, the calling
 * thread's current context's, else device 0). Loads the binaries on first use. Returns TRACEA_OK or the reason it did not
 * launch (TRACEA_ERROR_UNSUPPORTED_SHAPE: no variant of this export serves the sizes). */
static inline tracea_status {p}_launch(const tracea_conv2d_args* args, CUstream stream) {{
  return tracea__conv2d(&{p}__export, args, stream);
}}

/* Bytes of scratch args->workspace must hold for a call with these sizes and layouts (0 when none is needed):
 * the transposed copies of an NCHW input and a KCRS filter, and the split-K partial sums. */
static inline size_t {p}_workspace_bytes(const tracea_conv2d_args* args) {{
  return tracea__conv2d_workspace_bytes(&{p}__export, args);
}}"""


def api_summary(p: str) -> str:
    return f""" *   {p}_launch(&args, stream)        Y = conv(X, W) on `stream` (see tracea_conv2d_args in {HEADER})
 *   {p}_workspace_bytes(&args)       scratch bytes args.workspace needs (0: none)"""


def example(manifest: Mapping[str, Any], c_header: str) -> str:
    """example.cpp: runs the export on a stream with the input channels_last and then in NCHW (the filter in KCRS),
    both checked against a float64 reference computed there."""
    first = manifest["shape"][0]
    dtype = manifest["dtype"]
    text = (_template("example.cpp").replace("@SUPPORT@", example_support()).replace("@VERSION@", __version__)
            .replace("@HEADER@", c_header)
            .replace("@DTYPE@", dtype).replace("@EPILOGUE@", manifest["epilogue"])
            .replace("@STORAGE@", _STORAGE[dtype]).replace("@BOUND@", repr(get_dtype(dtype).bound)))
    for name in ("n", "h", "w", "c", "k", "r", "s"):
        text = text.replace(f"@{name.upper()}@", str(first[name]))
    for name in GEOMETRY:
        text = text.replace(f"@{name.upper()}@", str(manifest[name]))
    return text


ABI = ExportAbi(
    header=HEADER,
    header_text=header_text,
    slot_prefix="TRACEA_CONV2D_",
    pointers=POINTERS,
    ints=INTS,
    workspace="workspace",
    grid_sizes=("M", "N", "K"),
    dispatch=("batch", "in_h", "in_w", "in_c", "out_c", "flt_r", "flt_s"),
    tensors=(("X", None), ("filter", None), ("Y", None), ("bias", None), ("residual", None)),
    fields=fields,
    prefix=prefix,
    api=api,
    api_summary=api_summary,
    example=example,
)
