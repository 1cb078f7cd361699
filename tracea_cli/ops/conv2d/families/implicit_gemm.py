"""The CUDA implicit-GEMM conv2d families, `mma` (mma.sync tensor cores: fp16, bf16, tf32) and `simt` (FMA: exact
fp32), from kernels/cuda/conv2d_implicit.cuh on the GEMM engine's tiles.

Each configuration instantiates one template (`source`) with the problem's geometry (stride, padding, dilation) fixed
at compile time; sizes (N, H, W, C, K, R, S) are run-time parameters (TRACEA_CONV2D_PARAMS). The launch plan: split-K's
workspace zeroed, the main kernel over the output tiles of the implicit GEMM (M = N·P·Q by K; grid z the reduction's
slices), split-K's reduction with the epilogue. Before them a kernel, `conv2d_nchw_to_nhwc`, may run twice, each only
when its int is set: `x_is_nchw` for an input given in NCHW, `filter_is_kcrs` for a filter in torch's default
K x C x R x S; the exported C++ call sets them and transposes into its workspace first (docs/conv2d.md). Tuning and
benchmarks pass NHWC and KRSC and skip both. Space and hand-picked configurations:
implicit_gemm_space.py. Pure: no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tracea_cli.ops.conv2d.families.implicit_gemm_space import (
    FAMILY,
    SERIAL_MODES,
    SPLITK_REDUCE_THREADS,
    conv2d_space,
    hand_picked,
    serial_offered,
    tiling,
)
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.launch import KernelStep, LaunchPlan, MemsetStep
from tracea_cli.resources import kernel_translation_unit
from tracea_cli.space import SearchSpace, Value, config_key
from tracea_cli.target import Target

GENERATOR_VERSION = 1  # bump when the text `source` generates around the template changes
TEMPLATE = "cuda/conv2d_implicit.cuh"
SERIAL_TEMPLATE = "cuda/conv2d_splitk_serial.cuh"  # splitk_mode "serial": the one-launch sum, on TEMPLATE
MAIN_KERNEL = "conv2d_main"
REDUCE_KERNEL = "conv2d_splitk_reduce"
TRANSPOSE_KERNEL = "conv2d_nchw_to_nhwc"
# TRACEA_CONV2D_PARAMS: the filter's pointer is "filter" (the tensor W), the sizes by their own names (N, K, W of the
# GEMM view and of the tensor would clash): batch N, in_h H, in_w W, in_c C, out_c K, flt_r R, flt_s S
PARAMS = ("X", "filter", "Y", "bias", "residual", "workspace", "batch", "in_h", "in_w", "in_c", "out_c", "flt_r",
          "flt_s")
# TRACEA_NCHW_TO_NHWC_PARAMS of the two transposes: (source, destination, its N, C, H, W)
TRANSPOSE_PARAMS = ("X_nchw", "X", "batch", "in_c", "in_h", "in_w")
FILTER_TRANSPOSE_PARAMS = ("filter_kcrs", "filter", "out_c", "in_c", "flt_r", "flt_s")
TRANSPOSE_FLAG = "x_is_nchw"  # the int that makes the input's transpose run
FILTER_TRANSPOSE_FLAG = "filter_is_kcrs"  # and the filter's
TRANSPOSE_THREADS = 256
TRANSPOSE_PIXELS = 64  # output pixels (M) per block of the input's transpose (its blocks stride over 32 x 32 tiles)
FILTER_TRANSPOSE_FILTERS = 4  # output channels (N) per block of the filter's
TRANSPOSE_TILE = 32 * 33  # elements of its shared tile
ELEMENT = {"fp32": "float", "tf32": "float", "fp16": "__half", "bf16": "__nv_bfloat16"}
ITERATOR = {"analytic": "Analytic", "optimized": "Optimized", "few_channels": "FewChannels"}


def template_text(serial: bool = False) -> str:
    return kernel_translation_unit(SERIAL_TEMPLATE if serial else TEMPLATE)


def splitk_mode(config: Mapping[str, Value]) -> str:
    """How a configuration that splits K sums its slices: "reduce" (three steps) or "serial" (one launch); "reduce"
    when it lacks the parameter (stored before it existed)."""
    return str(config.get("splitk_mode", "reduce"))


def is_serial(config: Mapping[str, Value]) -> bool:
    """Whether the configuration sums its slices in one launch ("serial" or "serial_ordered")."""
    return int(config["split_k"]) > 1 and splitk_mode(config) in SERIAL_MODES


def serial_workspace_bytes(config: Mapping[str, Value]) -> int:
    """Workspace bytes per output element of a serial configuration: the fp32 sums (one set, or one per slice for
    serial_ordered), then room for the tiles' int counters (never more tiles than output elements)."""
    return 4 * (int(config["split_k"]) if splitk_mode(config) == "serial_ordered" else 1) + 4


def conv2d_source(problem: Conv2dProblem, config: Mapping[str, Value]) -> str:
    """The exact, self-contained CUDA source of one configuration (what is compiled, hashed and exported)."""
    p = problem
    family = str(config["family"])
    serial = is_serial(config)
    ordered = ", true" if serial and splitk_mode(config) == "serial_ordered" else ""
    t = tiling(problem, config)
    element = ELEMENT[p.dtype]
    # BiasResidualRelu is tile_mainloops.cuh's value after gemm_common.cuh's epilogues
    epilogue = "tracea::BIAS_RESIDUAL_RELU" if p.epilogue == "bias_residual_relu" else \
        f"tracea::Epilogue::{p.fused.template_name}"
    head = f"tracea::{'MmaGemm' if family == 'mma' else 'SimtGemm'}<{element}, tracea::Layout::NT, {epilogue}, "
    names = ("block_m", "block_n", "block_k", "warp_m", "warp_n") + (("stages",) if family == "mma" else ()) + \
        ("vec", "split_k", "group_m")
    geometry = ", ".join(str(v) for v in (p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w))
    iterator = f"tracea::ConvIterator::{ITERATOR[str(config['iterator'])]}"
    # a configuration naming splitk_mode "reduce" is the one that did not name it: the same text, the same binary
    shown = {k: v for k, v in config.items() if k != "splitk_mode" or v != "reduce"}
    lines = [
        f"// Tracea CUDA conv2d ({p.dtype}, stride {p.stride_h}x{p.stride_w}, pad {p.pad_h}x{p.pad_w}, dilation "
        f"{p.dilation_h}x{p.dilation_w}, epilogue {p.epilogue})",
        f"// configuration {config_key(shown)}",
        template_text(serial),
        f"using Tile = {head}{', '.join(str(int(config[n])) for n in names)}>;",
        f"using Geometry = tracea::ConvGeometry<{geometry}>;",
        f'static_assert(Tile::THREADS == {t.threads}, "block size differs from the launch description");',
        f'static_assert(Tile::SMEM_BYTES == {t.smem_bytes}, "shared memory differs from the launch description");',
        f'extern "C" __global__ void __launch_bounds__(Tile::THREADS) {MAIN_KERNEL}(TRACEA_CONV2D_PARAMS) '
        f"{{ tracea::conv2d_{family}{'_serial' if serial else ''}<Tile, Geometry, {iterator}{ordered}>"
        "(TRACEA_CONV2D_ARGS); }",
    ]
    if int(config["split_k"]) > 1 and not serial:
        lines.append(f'extern "C" __global__ void __launch_bounds__({SPLITK_REDUCE_THREADS}) {REDUCE_KERNEL}'
                     "(TRACEA_CONV2D_PARAMS) { tracea::conv2d_splitk_reduce<Tile::T, Tile::EPILOGUE, Geometry>"
                     "(TRACEA_CONV2D_ARGS); }")
    lines.append(f'extern "C" __global__ void __launch_bounds__({TRANSPOSE_THREADS}) {TRANSPOSE_KERNEL}'
                 f"(TRACEA_NCHW_TO_NHWC_PARAMS) {{ tracea::nchw_to_nhwc(static_cast<const {element} *>(src), "
                 f"static_cast<{element} *>(dst), n, c, h, w); }}")
    return "\n".join(lines) + "\n"


def conv2d_launch(problem: Conv2dProblem, config: Mapping[str, Value]) -> LaunchPlan:
    """The NCHW and KCRS transposes (only where `x_is_nchw`, `filter_is_kcrs` are set), split-K's workspace zeroed,
    the main kernel over the output tiles (grid z: the reduction's slices), split-K's reduction. Serial split-K: the
    workspace (sums, then one counter per tile: serial_workspace_bytes per output element) zeroed once when it is
    allocated (`MemsetStep(once=True)`: the main kernel leaves it zero), and the main kernel alone."""
    t = tiling(problem, config)
    split = int(config["split_k"])
    serial = is_serial(config)
    elem = t.copy_bytes // int(config["vec"])
    steps: list[Any] = [
        KernelStep(TRANSPOSE_KERNEL, grid=(f"m/{TRANSPOSE_PIXELS}", 1, 1), block=(TRANSPOSE_THREADS, 1, 1),
                   dynamic_smem_bytes=TRANSPOSE_TILE * elem, params=TRANSPOSE_PARAMS, when=TRANSPOSE_FLAG),
        KernelStep(TRANSPOSE_KERNEL, grid=(f"n/{FILTER_TRANSPOSE_FILTERS}", 1, 1), block=(TRANSPOSE_THREADS, 1, 1),
                   dynamic_smem_bytes=TRANSPOSE_TILE * elem, params=FILTER_TRANSPOSE_PARAMS,
                   when=FILTER_TRANSPOSE_FLAG)]
    if split > 1:
        steps.append(MemsetStep(elem_bytes=serial_workspace_bytes(config) if serial else 4, once=serial))
    steps.append(KernelStep(MAIN_KERNEL, grid=("tiles", 1, "split_k"), block=(t.threads, 1, 1),
                            dynamic_smem_bytes=t.smem_bytes))
    if split > 1 and not serial:
        steps.append(KernelStep(REDUCE_KERNEL, grid=(f"mn/{SPLITK_REDUCE_THREADS}", 1, 1),
                                block=(SPLITK_REDUCE_THREADS, 1, 1)))
    per_mn = (serial_workspace_bytes(config) if serial else 4) if split > 1 else 0
    return LaunchPlan(steps=tuple(steps), params=PARAMS, tile_m=int(config["block_m"]), tile_n=int(config["block_n"]),
                      split_k=split, workspace_bytes_per_mn=per_mn, alignment_bytes=t.copy_bytes)


def conv2d_args(problem: Conv2dProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
    """The values of TRACEA_CONV2D_PARAMS (the workspace comes from the runtime), the GEMM view's sizes the grid rules
    read (M = N·P·Q, N = K, K = R·S·C), and the transposes' flags, off: X is NHWC, the filter KRSC."""
    p = problem
    return {"X": operands["X"], "filter": operands["W"], "Y": operands["Y"], "bias": operands.get("bias"),
            "residual": operands.get("residual"), "X_nchw": None, "filter_kcrs": None,
            "M": p.gemm_m, "N": p.k, "K": p.taps,
            "batch": p.n, "in_h": p.h, "in_w": p.w, "in_c": p.c, "out_c": p.k, "flt_r": p.r, "flt_s": p.s,
            TRANSPOSE_FLAG: 0, FILTER_TRANSPOSE_FLAG: 0}


@dataclass(frozen=True)
class ImplicitGemmFamily:
    """`mma` or `simt`: one of the implicit-GEMM template families (ops/base.Family)."""

    name: str
    backend: str = "cuda"

    def _serves(self, problem: Conv2dProblem) -> bool:
        return FAMILY.get(problem.dtype) == self.name

    def space(self, problem: Conv2dProblem, target: Target) -> SearchSpace | str:
        if not self._serves(problem):
            return f"the {self.name} family has no {problem.dtype} kernels"
        return conv2d_space(problem, target)

    def template(self, problem: Conv2dProblem) -> str | None:
        """What the problem's cache key hashes: the template, and the serial split-K header only where the space
        offers it (a larger problem's key is what it was before serial split-K existed)."""
        if not self._serves(problem):
            return None
        text = f"generator {GENERATOR_VERSION}\n{template_text()}"
        return f"{text}\nserial split-K\n{template_text(serial=True)}" if serial_offered(problem) else text

    def source(self, problem: Conv2dProblem, config: Mapping[str, Value]) -> str:
        return conv2d_source(problem, config)

    def launch(self, problem: Conv2dProblem, config: Mapping[str, Value]) -> LaunchPlan:
        return conv2d_launch(problem, config)

    def args(self, problem: Conv2dProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
        return conv2d_args(problem, operands)

    def suggested(self, problem: Conv2dProblem, target: Target) -> list[dict[str, Value]]:
        if not self._serves(problem):
            return []
        return hand_picked(problem, target, limit=3)


MMA = ImplicitGemmFamily("mma")
SIMT = ImplicitGemmFamily("simt")
