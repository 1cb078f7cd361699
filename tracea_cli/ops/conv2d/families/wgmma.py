"""conv2d's Hopper family `wgmma`: convolutions on the GEMM op's wgmma pipeline (kernels/cuda/gemm_wgmma.cuh: TMA,
wgmma, warp-specialised producer/consumer, persistent tiles), in two forms (wgmma_space.py says which serves what).

1x1, stride 1, no padding or dilation: the convolution is its GEMM view (wgmma_space.gemm_view: nt, M = N·H·W,
N = K, K = C): X (NHWC) is A, M x C row-major; the filter (KRSC with R = S = 1) is B, K x C; Y (NPQK) is C, M x K. The
GEMM family's defines, tensor maps and launch plan (gemm/families/wgmma.py) are used as they are, over the view.

Every other convolution the maps can describe: the TMA im2col kernel (kernels/cuda/conv2d_wgmma_im2col.cuh), the
GEMM kernel's pipeline and consumer with an im2col producer and its own entry point (`im2col_source`); its plan
(`im2col_launch`) has an im2col map over X, a 3-D tiled map over the filter and the GEMM's 2-D map over Y
(wgmma_im2col.py computes their arguments).

What conv2d adds to the GEMM text lives in kernels/cuda/conv2d_wgmma.cuh, pulled in by conv2d's translation units
only: the ReLU after the residual of bias_residual_relu, called from one line this generator pastes into the GEMM
kernel's epilogue (`AFTER_RESIDUAL`). The GEMM op's own text, and so every GEMM cache key, is unchanged. Pure: no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from tracea_cli.ops.conv2d.families import wgmma_im2col as im
from tracea_cli.ops.conv2d.families import wgmma_space as cs
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.gemm.families import wgmma as gemm_wgmma
from tracea_cli.ops.gemm.families.engine import gemm_args
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.launch import KernelStep, LaunchPlan, TensorMap
from tracea_cli.resources import kernel_source
from tracea_cli.space import SearchSpace, Value, config_key
from tracea_cli.target import Target

GENERATOR_VERSION = 1  # bump when the text `source` generates around the headers changes
CONV_HEADER = "cuda/conv2d_wgmma.cuh"
IM2COL_HEADER = "cuda/conv2d_wgmma_im2col.cuh"  # general convolutions: the TMA im2col producer
IM2COL_KERNEL = "conv2d_wgmma_im2col"
# The im2col kernel's parameters in signature order (kernels/cuda/conv2d_wgmma_im2col.cuh)
IM2COL_PARAMS = ("map_x", "map_w", "map_c", "Y", "bias", "residual", "workspace", "M", "N", "C", "ldc", "P", "Q",
                 "stride_h", "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w")
# Where the GEMM kernel's own entry point begins: the im2col translation unit has its own entry instead.
GEMM_ENTRY = '}  // namespace wg\n\nextern "C" __global__ void __launch_bounds__(wg::kThreads, 1)\n    gemm_wgmma('

# The GEMM kernel's store of one output pair in its epilogue: the hook goes right before it (after the residual).
STORE_LINE = "            store_pair(staging, C, r, col_in_tile, row, col, M, N, at, v0, v1);\n"
AFTER_RESIDUAL = "            WG_CONV_AFTER_RESIDUAL(v0, v1);\n"
# Split-K's second pass (gemm_wgmma_splitk.cuh) stores one value: the same hook goes before it.
SPLITK_STORE_LINE = "  C[at] = to_elem(v);\n"
SPLITK_AFTER_RESIDUAL = "  WG_CONV_AFTER_RESIDUAL(v, v);\n"


def headers_text(problem: Conv2dProblem) -> str:
    """conv2d's additions, then the GEMM family's headers for the problem's view with the hook pasted in before each
    store of C (the main kernel's epilogue, split-K's second pass). Raises RuntimeError if the GEMM text no longer has
    exactly one place for each (an epilogue changed: update STORE_LINE or SPLITK_STORE_LINE)."""
    gemm = gemm_wgmma.headers_text(cs.view(problem))
    for line, hook in ((STORE_LINE, AFTER_RESIDUAL), (SPLITK_STORE_LINE, SPLITK_AFTER_RESIDUAL)):
        if gemm.count(line) != 1:
            raise RuntimeError(f"{gemm_wgmma.HEADER} has {gemm.count(line)} copies of an epilogue's store "
                               f"({line.strip()!r}), not 1: conv2d's wgmma family cannot place its after-residual hook")
        gemm = gemm.replace(line, hook + line, 1)
    return kernel_source(CONV_HEADER) + "\n" + gemm


def defines(problem: Conv2dProblem, config: Mapping[str, Value]) -> dict[str, int]:
    return {**gemm_wgmma.defines(cs.gemm_view(problem), config), "WG_POST_RELU": int(cs.post_relu(problem))}


def wgmma_source(problem: Conv2dProblem, config: Mapping[str, Value]) -> str:
    """The exact, self-contained translation unit compiled for this configuration."""
    view = cs.gemm_view(problem)
    head = (f"// tracea conv2d, family wgmma: {problem.label} as {view.label} (epilogue {problem.epilogue}), "
            f"config {config_key(config)}\n")
    return head + "".join(f"#define {k} {v}\n" for k, v in defines(problem, config).items()) + headers_text(problem)


def im2col_source(problem: Conv2dProblem, config: Mapping[str, Value]) -> str:
    """The exact translation unit of the im2col kernel (kernels/cuda/conv2d_wgmma_im2col.cuh) for a general
    convolution: the GEMM family's defines over a view with the problem's M and N (K = C: the reduction's size is the
    kernel's business), then `im2col_text`. Raises RuntimeError where the GEMM text lacks the places it needs."""
    p = problem
    view = GemmProblem(m=p.gemm_m, n=p.k, k=p.c, dtype=p.dtype, layout="nt", epilogue=cs.EPILOGUE_VIEW[p.epilogue][0])
    values = {**gemm_wgmma.defines(view, config), "WG_POST_RELU": int(cs.post_relu(problem)), "WG_CONV_R": p.r,
              "WG_CONV_S": p.s}
    head = f"// tracea conv2d, family wgmma, im2col: {problem.label}, config {config_key(config)}\n"
    return head + "".join(f"#define {k} {v}\n" for k, v in values.items()) + im2col_text(problem)


def im2col_text(problem: Conv2dProblem) -> str:
    """The im2col translation unit's text after its defines: conv2d's hook, the GEMM kernel's pipeline without its
    entry point, then the im2col producer and entry, and split-K's second pass (compiled only where WG_SPLIT_K > 1).
    Raises RuntimeError where the GEMM text lacks the places."""
    text = headers_text(problem)
    splitk = kernel_source(gemm_wgmma.SPLITK_HEADER).splitlines(keepends=True)[0]  # its first line
    for part in (GEMM_ENTRY, splitk):
        if text.count(part) != 1:
            raise RuntimeError(f"{gemm_wgmma.HEADER} has {text.count(part)} copies of {part.strip()!r}, not 1: "
                               "conv2d's im2col kernel cannot replace the GEMM entry point")
    return (text[: text.index(GEMM_ENTRY)] + "}  // namespace wg\n\n" + kernel_source(IM2COL_HEADER) + "\n"
            + text[text.index(splitk):])


def im2col_launch(problem: Conv2dProblem, config: Mapping[str, Value]) -> LaunchPlan:
    """The im2col kernel's plan: the GEMM family's grid, block, cluster and shared memory for the configuration
    (persistent_clusters or work_clusters over M = N·P·Q and N = K, times the K slices of split-K), its own
    parameters, three tensor maps: X (im2col), the filter (tiled3d), Y (the GEMM's 2-D map of C over the output), and
    split-K's zeroing and second pass (over Y) where the configuration splits K."""
    p = problem
    gemm = gemm_wgmma.wgmma_launch(cs.im2col_view(p), config)
    if gemm.scratch:  # the view's K is whole k-steps and C, K are aligned: never staged
        raise RuntimeError(f"the GEMM family's plan for {p.label}'s im2col view stages an operand; the im2col kernel "
                           "reads X and the filter in place")
    main = gemm.main_kernel
    step = KernelStep(IM2COL_KERNEL, grid=main.grid, block=main.block, dynamic_smem_bytes=main.dynamic_smem_bytes,
                      cluster=main.cluster)
    before, after = gemm_wgmma.split_steps(gemm.split_k or 1)
    after = tuple(replace(s, params=tuple("Y" if name == "C" else name for name in s.params)) for s in after)
    c = gemm.tensor_maps["map_c"]
    maps = {**im.tensor_maps(p, config),
            "map_c": TensorMap("Y", c.dims, c.row_stride, c.box, c.dtype, c.elem_bytes)}
    return LaunchPlan(steps=(*before, step, *after), params=IM2COL_PARAMS, tensor_maps=maps, tile_m=gemm.tile_m,
                      tile_n=gemm.tile_n, tile_k=im.tile_k(p.dtype), cluster_m=gemm.cluster_m,
                      persistent=gemm.persistent, split_k=gemm.split_k,
                      workspace_bytes_per_mn=gemm.workspace_bytes_per_mn, alignment_bytes=gemm.alignment_bytes,
                      family=gemm.family, arch=gemm.arch, work=gemm.work)


def im2col_args(problem: Conv2dProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
    """The im2col kernel's arguments: X, W, Y, bias and residual by name; its geometry; the sizes its maps read
    (`wgmma_im2col.map_sizes`); and "K" = R·S·C, the implicit GEMM's reduction, for the grid rules."""
    p = problem
    return {"X": operands["X"], "W": operands["W"], "Y": operands["Y"], "bias": operands.get("bias"),
            "residual": operands.get("residual"), "M": p.gemm_m, "N": p.k, "K": p.r * p.s * p.c, "C": p.c,
            "ldc": p.k, "P": p.p, "Q": p.q, "stride_h": p.stride_h, "stride_w": p.stride_w, "pad_h": p.pad_h,
            "pad_w": p.pad_w, "dilation_h": p.dilation_h, "dilation_w": p.dilation_w, **im.map_sizes(p)}


def conv2d_args(problem: Conv2dProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
    """The GEMM view's arguments: X as A (lda = C), the filter as B (nt, ldb = C), Y as C (ldc = K)."""
    view = cs.gemm_view(problem)
    return gemm_args(view, {"A": operands["X"], "B": operands["W"], "C": operands["Y"],
                                       "bias": operands.get("bias"), "residual": operands.get("residual")})


@dataclass(frozen=True)
class WgmmaFamily:
    """conv2d's `wgmma` family (ops/base.Family)."""

    name: str = cs.FAMILY
    backend: str = "cuda"

    def space(self, problem: Conv2dProblem, target: Target) -> SearchSpace | str:
        return cs.conv2d_space(problem, target)

    def template(self, problem: Conv2dProblem) -> str | None:
        """None for problems the family has no kernel for on any target, so that their keys stay what they were; the
        GEMM text for 1x1 stride 1 (as before the im2col form), the im2col unit's text for the rest."""
        if cs.problem_reason(problem) is not None:
            return None
        if cs.is_gemm(problem):
            return f"generator {GENERATOR_VERSION}\n{headers_text(problem)}"
        return f"generator {GENERATOR_VERSION}\nim2col\n{im2col_text(problem)}"

    def source(self, problem: Conv2dProblem, config: Mapping[str, Value]) -> str:
        return wgmma_source(problem, config) if cs.is_gemm(problem) else im2col_source(problem, config)

    def launch(self, problem: Conv2dProblem, config: Mapping[str, Value]) -> LaunchPlan:
        if cs.is_gemm(problem):
            return gemm_wgmma.wgmma_launch(cs.gemm_view(problem), config)
        return im2col_launch(problem, config)

    def args(self, problem: Conv2dProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
        return conv2d_args(problem, operands) if cs.is_gemm(problem) else im2col_args(problem, operands)

    def suggested(self, problem: Conv2dProblem, target: Target) -> list[dict[str, Value]]:
        return cs.hand_picked(problem, target, limit=3)

    def serves(self, built_for: Conv2dProblem, config: Mapping[str, Value], problem: Conv2dProblem) -> str | None:
        """A kernel of one form serves problems of that form only (the GEMM kernel 1x1 stride-1 ones, the im2col one
        the rest), and the im2col kernel its own filter size (WG_CONV_R and WG_CONV_S are compiled in; its maps'
        corners follow from them and the geometry). Other sizes are run-time arguments."""
        if cs.is_gemm(built_for) != cs.is_gemm(problem):
            form = "1x1 stride-1 GEMM" if cs.is_gemm(built_for) else "TMA im2col"
            return f"the kernel built for {built_for.label} is the {form} form, which {problem.label} does not take"
        if not cs.is_gemm(built_for) and (problem.r, problem.s) != (built_for.r, built_for.s):
            return (f"the im2col kernel is built for a {built_for.r}x{built_for.s} filter, not "
                    f"{problem.r}x{problem.s}")
        return None


WGMMA = WgmmaFamily()
