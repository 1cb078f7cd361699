"""conv2d's Hopper family `wgmma`: convolutions that are a GEMM (1x1, stride 1, no padding or dilation) on the GEMM
op's wgmma kernel (kernels/cuda/gemm_wgmma.cuh: TMA, wgmma, warp-specialised producer/consumer, persistent tiles).

The convolution is its GEMM view (wgmma_space.gemm_view: nt, M = N·H·W, N = K, K = C): X (NHWC) is A, M x C
row-major; the filter (KRSC with R = S = 1) is B, K x C; Y (NPQK) is C, M x K. The GEMM family's defines, tensor maps
and launch plan (gemm/families/wgmma.py) are used as they are, over the view. What conv2d adds lives in
kernels/cuda/conv2d_wgmma.cuh, pulled in by conv2d's translation unit only: the ReLU after the residual of
bias_residual_relu, called from one line this generator pastes into the GEMM kernel's epilogue (`AFTER_RESIDUAL`).
The GEMM op's own text, and so every GEMM cache key, is unchanged. Pure: no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tracea_cli.ops.conv2d.families import wgmma_space as cs
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.gemm.families import wgmma as gemm_wgmma
from tracea_cli.ops.gemm.families.engine import gemm_args
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.launch import LaunchPlan
from tracea_cli.resources import kernel_source
from tracea_cli.space import SearchSpace, Value, config_key
from tracea_cli.target import Target

GENERATOR_VERSION = 1  # bump when the text `source` generates around the headers changes
CONV_HEADER = "cuda/conv2d_wgmma.cuh"
IM2COL_HEADER = "cuda/conv2d_wgmma_im2col.cuh"  # step 2: general convolutions (not wired in, not run on a GPU)
IM2COL_KERNEL = "conv2d_wgmma_im2col"
# Where the GEMM kernel's own entry point begins: the im2col translation unit has its own entry instead.
GEMM_ENTRY = '}  // namespace wg\n\nextern "C" __global__ void __launch_bounds__(wg::kThreads, 1)\n    gemm_wgmma('

# The GEMM kernel's store of one output pair in its epilogue: the hook goes right before it (after the residual).
STORE_LINE = "            store_pair(staging, C, r, col_in_tile, row, col, M, N, at, v0, v1);\n"
AFTER_RESIDUAL = "            WG_CONV_AFTER_RESIDUAL(v0, v1);\n"


def headers_text(problem: Conv2dProblem) -> str:
    """conv2d's additions, then the GEMM family's headers for the problem's view with the hook pasted in. Raises
    RuntimeError if the GEMM kernel no longer has exactly one place for it (its epilogue changed: update STORE_LINE)."""
    gemm = gemm_wgmma.headers_text(cs.gemm_view(problem))
    if gemm.count(STORE_LINE) != 1:
        raise RuntimeError(f"{gemm_wgmma.HEADER} has {gemm.count(STORE_LINE)} copies of its epilogue's store, not 1: "
                           "conv2d's wgmma family cannot place its after-residual hook")
    return kernel_source(CONV_HEADER) + "\n" + gemm.replace(STORE_LINE, AFTER_RESIDUAL + STORE_LINE, 1)


def defines(problem: Conv2dProblem, config: Mapping[str, Value]) -> dict[str, int]:
    return {**gemm_wgmma.defines(cs.gemm_view(problem), config), "WG_POST_RELU": int(cs.post_relu(problem))}


def wgmma_source(problem: Conv2dProblem, config: Mapping[str, Value]) -> str:
    """The exact, self-contained translation unit compiled for this configuration."""
    view = cs.gemm_view(problem)
    head = (f"// tracea conv2d, family wgmma: {problem.label} as {view.label} (epilogue {problem.epilogue}), "
            f"config {config_key(config)}\n")
    return head + "".join(f"#define {k} {v}\n" for k, v in defines(problem, config).items()) + headers_text(problem)


def im2col_source(problem: Conv2dProblem, config: Mapping[str, Value]) -> str:
    """Step 2, compile-checked only: the translation unit of the im2col kernel (kernels/cuda/conv2d_wgmma_im2col.cuh)
    for a general convolution: the GEMM family's defines over a view with the problem's M and N (K = C: the
    reduction's size is the kernel's business), conv2d's hook, the GEMM kernel's pipeline without its entry point,
    and the im2col producer and entry. Raises RuntimeError where the GEMM text lacks the places it needs."""
    p = problem
    view = GemmProblem(m=p.gemm_m, n=p.k, k=p.c, dtype=p.dtype, layout="nt", epilogue=cs.EPILOGUE_VIEW[p.epilogue][0])
    text = headers_text(problem)
    if text.count(GEMM_ENTRY) != 1:
        raise RuntimeError(f"{gemm_wgmma.HEADER} has {text.count(GEMM_ENTRY)} copies of its entry point's opening, "
                           "not 1: conv2d's im2col kernel cannot replace it")
    pipeline = text[: text.index(GEMM_ENTRY)] + "}  // namespace wg\n"
    values = {**gemm_wgmma.defines(view, config), "WG_POST_RELU": int(cs.post_relu(problem)), "WG_CONV_R": p.r,
              "WG_CONV_S": p.s}
    head = (f"// tracea conv2d, family wgmma, im2col (step 2, not run on a GPU): {problem.label}, "
            f"config {config_key(config)}\n")
    return (head + "".join(f"#define {k} {v}\n" for k, v in values.items()) + pipeline + "\n"
            + kernel_source(IM2COL_HEADER))


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
        """None for problems the family has no kernel for on any target, so that their keys stay what they were."""
        if cs.problem_reason(problem) is not None:
            return None
        return f"generator {GENERATOR_VERSION}\n{headers_text(problem)}"

    def source(self, problem: Conv2dProblem, config: Mapping[str, Value]) -> str:
        return wgmma_source(problem, config)

    def launch(self, problem: Conv2dProblem, config: Mapping[str, Value]) -> LaunchPlan:
        return gemm_wgmma.wgmma_launch(cs.gemm_view(problem), config)

    def args(self, problem: Conv2dProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
        return conv2d_args(problem, operands)

    def suggested(self, problem: Conv2dProblem, target: Target) -> list[dict[str, Value]]:
        return cs.hand_picked(problem, target, limit=3)


WGMMA = WgmmaFamily()
