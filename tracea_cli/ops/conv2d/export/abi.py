"""conv2d's part of the exported ABI (docs/conv2d.md, "Export"): the op header tracea_conv2d.h (the argument struct, the
epilogue enum, the C++ call `tracea::conv2d`), the slots the launch tables name, the prefix functions of an export's
header and the example program. The export itself (export/) reads it through the op's `export` attribute.

An export serves the geometry and epilogue it was tuned for (its `fields`: stride, padding and dilation per axis,
then the epilogue's code); the sizes N, H, W, C, K, R, S dispatch between its variants. The grid rules read the
implicit GEMM's M = N·P·Q, N = K and K = R·S·C, which the header computes from the sizes and the geometry.

The implicit-GEMM families name their values by these slots. The Hopper wgmma family's plans name some otherwise:
its 1x1 plan is the GEMM op's over the convolution's GEMM view (A, B, C and their leading dimensions), its im2col
plan names the filter W and the channels C; `slot_names` gives each plan's names their conv2d slots, and the slots
after x_is_nchw carry what only the im2col kernel reads (the output's P x Q, the geometry, X's and the filter's
strides). Neither wgmma plan transposes: `requests` makes a call with an NCHW input or a KCRS filter skip their
variants (TRACEA_ERROR_UNSUPPORTED_LAYOUT where no other serves it)."""

from __future__ import annotations

from importlib import resources
from typing import Any, Mapping

from tracea_cli import __version__
from tracea_cli.ops.base import ExportAbi
from tracea_cli.ops.conv2d.families.wgmma import IM2COL_KERNEL
from tracea_cli.ops.conv2d.problem import EPILOGUES, GEOMETRY, Conv2dProblem
from tracea_cli.ops.dtypes import get_dtype
from tracea_cli.ops.export_example import example_support
from tracea_cli.ops.gemm.families.wgmma import KERNEL_NAME as GEMM_WGMMA_KERNEL
from tracea_cli.ops.launch import LaunchPlan

HEADER = "tracea_conv2d.h"
# the kernels' parameter names (families/implicit_gemm.py): the tensors, the transposes' sources, the workspace
POINTERS = ("X", "filter", "Y", "bias", "residual", "workspace", "X_nchw", "filter_kcrs")
INTS = ("M", "N", "K", "batch", "in_h", "in_w", "in_c", "out_c", "flt_r", "flt_s", "x_is_nchw", "filter_is_kcrs",
        "P", "Q", "stride_h", "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w", "x_row", "x_image", "w_taps",
        "w_row")
# The wgmma family's names by kernel: the GEMM view (X is A, M x C; the filter B, K x C; Y is C, M x K) and the im2col
# kernel's (wgmma_im2col.map_sizes: X's W, H, N; the filter W; the channels C; Y's row stride ldc = K)
WGMMA_SLOT_NAMES = {
    GEMM_WGMMA_KERNEL: {"A": "X", "B": "filter", "C": "Y", "lda": "in_c", "ldb": "in_c", "ldc": "out_c"},
    IM2COL_KERNEL: {"W": "filter", "C": "in_c", "ldc": "out_c", "x_w": "in_w", "x_h": "in_h", "x_n": "batch"},
}
# a call's requests for a pre-pass: transpose an NCHW input, a KCRS filter (the implicit-GEMM families' first steps)
REQUESTS = ("x_is_nchw", "filter_is_kcrs")
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


def slot_names(plan: LaunchPlan) -> Mapping[str, str]:
    """The conv2d slots of what `plan` names otherwise (the wgmma family's plans; {} for the others)."""
    main = plan.main_kernel
    return WGMMA_SLOT_NAMES.get(main.name, {}) if main is not None else {}


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
    slot_names=slot_names,
    requests=REQUESTS,
)
