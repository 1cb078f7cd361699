"""The Hopper GEMM family: wgmma + TMA + warp specialisation (kernels/cuda/gemm_wgmma.cuh), built for sm_90a.

One configuration is one set of `#define`s over the family's headers (`source`). Its launch (`launch`, docs/kernel-abi.md,
"Hopper family") passes TMA tensor maps by value, launches clusters (`cluster_m`) and sizes a persistent grid from
the device's resident clusters; problems that TMA cannot read in place (wgmma_space.staging) get staging kernels
first on the same stream, into scratch in the workspace. Space and default configuration: wgmma_space.py. Pure: no
GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tracea_cli.ops.gemm.families import wgmma_space as hs
from tracea_cli.ops.gemm.families.engine import RAGGED_N_ELEMENT_WISE, gemm_args
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.launch import (
    SCRATCH_ALIGN_BYTES,
    KernelStep,
    LaunchPlan,
    MemsetStep,
    Scratch,
    TensorMap,
)
from tracea_cli.resources import kernel_source
from tracea_cli.space import SearchSpace, Value, config_key
from tracea_cli.target import Target

KERNEL_NAME = "gemm_wgmma"
SPLITK_NAME = "gemm_wgmma_splitk"  # split-K's second pass: the epilogue over the workspace's sums
SPLITK_THREADS = 256  # gemm_wgmma_splitk.cuh: WG_SPLITK_THREADS
STAGE_A_NAME = "gemm_stage_a"
STAGE_B_NAME = "gemm_stage_b"
HEADER = "cuda/gemm_wgmma.cuh"
MMA_HEADER = "cuda/gemm_wgmma_mma.cuh"
STAGE_HEADER = "cuda/gemm_wgmma_stage.cuh"
RAGGED_N_HEADER = "cuda/gemm_wgmma_ragged_n.cuh"
SPLITK_HEADER = "cuda/gemm_wgmma_splitk.cuh"
ARCH = "sm_90a"  # wgmma and setmaxnreg exist only on the architecture-specific target
PARAMS = ("map_a", "map_b", "map_c", "C", "bias", "residual", "workspace", "M", "N", "K", "ldc")
SPLITK_PARAMS = ("workspace", "C", "bias", "residual", "M", "N", "ldc")  # gemm_wgmma_splitk's, in signature order
STAGE_THREADS = 256  # gemm_wgmma_stage.cuh: kThreads
STAGE_COPY_ROWS = 8  # rows per block of the copy (one warp each)
STAGE_COPY_BYTES = 512  # bytes of columns per block of the copy (a warp's 32 16-byte chunks)
STAGE_TILE = 64  # the transpose's tile (64 x 64 elements)


# Where a ragged N changes the kernel's text (wgmma_space.ragged_n): gemm_wgmma.cuh's lines, and what replaces each.
# The kernel header itself stays as it is, so that no other problem's source (and cache key) changes.
RAGGED_N_EDITS = (
    ("// Stores one pair of outputs: to the swizzled staging tile (TMA store) or straight to C.\n",
     "{ragged}// Stores one pair of outputs: to the swizzled staging tile (TMA store) or straight to C.\n"),
    ("  if (row < M && col < N) *reinterpret_cast<pair_t*>(C + at) = pack(v0, v1);\n",
     "  if (row < M && col < N) ragged_store(C + at, col, N, v0, v1);\n"),
    ("        bias_pair[b] = __ldg(reinterpret_cast<const pair_t*>(bias + min(n0 + 8 * (i0 + b) + 2 * (lane % 4), N - 2)));\n",
     "        bias_pair[b] = ragged_bias_pair(bias, n0 + 8 * (i0 + b) + 2 * (lane % 4), N);\n"),
    ("              const float2 res = unpack(__ldg(reinterpret_cast<const pair_t*>(residual + at)));\n",
     "              const float2 res = unpack(ragged_residual_pair(residual + at, col, N));\n"),
    ("               const __grid_constant__ wg::TensorMap map_c, wg::elem_t* __restrict__ C,\n",
     "               wg::elem_t* __restrict__ C,\n"),
    ("    consume(ring, &map_c, C, bias,", "    consume(ring, nullptr, C, bias,"),
)


def ragged_n_text(kernel: str) -> str:
    """gemm_wgmma.cuh's text for a ragged N: the element-wise helpers pasted before the epilogue, which loads bias and
    residual and stores C through them, and an entry point without map_c. Raises RuntimeError where the kernel no
    longer has exactly one of a line these edits replace (its epilogue or entry changed: update RAGGED_N_EDITS)."""
    for old, new in RAGGED_N_EDITS:
        if kernel.count(old) != 1:
            raise RuntimeError(f"{HEADER} has {kernel.count(old)} copies of {old.strip()!r}, not 1: the ragged-N "
                               "edits cannot be placed")
        kernel = kernel.replace(old, new.replace("{ragged}", kernel_source(RAGGED_N_HEADER)), 1)
    return kernel


def headers_text(problem: GemmProblem) -> str:
    """The family's headers, the mma wrappers inlined where the kernel includes them, with the ragged-N edits where
    `problem` needs them (wgmma_space.ragged_n); split-K's second pass (compiled only where WG_SPLIT_K > 1); the
    staging entries appended when it needs them (wgmma_space.staging)."""
    kernel = kernel_source(HEADER)
    if hs.ragged_n(problem):
        kernel = ragged_n_text(kernel)
    text = kernel.replace('#include "gemm_wgmma_mma.cuh"', kernel_source(MMA_HEADER), 1)
    text += "\n" + kernel_source(SPLITK_HEADER)
    if hs.staging(problem).any:
        text += "\n" + kernel_source(STAGE_HEADER)
    return text


def defines(problem: GemmProblem, config: Mapping[str, Value]) -> dict[str, int]:
    staged = hs.staging(problem)
    out = {
        "WG_DTYPE": hs.DTYPE_CODES[problem.dtype],
        "WG_TILE_M": int(config["tile_m"]),
        "WG_TILE_N": int(config["tile_n"]),
        "WG_STAGES": int(config["stages"]),
        "WG_CONSUMERS": int(config["consumers"]),
        "WG_CLUSTER_M": int(config["cluster_m"]),
        "WG_PERSISTENT": int(config["persistent"]),
        "WG_GROUP_M": int(config["group_m"]),
        "WG_B_KMAJOR": 1 if problem.layout == "nt" or staged.b == "transpose" else 0,
        "WG_EPILOGUE": problem.fused.code,
        "WG_STORE_TMA": 1 if config["store"] == "tma" else 0,
        "WG_PINGPONG": 1 if config["schedule"] == "pingpong" else 0,
        "WG_SPLIT_K": hs.split_k_of(config),
    }
    if hs.cluster_k_of(config) > 1:  # defined only for K pairs: every other configuration's source stays as it was
        out["WG_CLUSTER_K"] = hs.cluster_k_of(config)
    if staged.any:
        out["WG_STAGE_A"] = int(staged.pad_a)
        out["WG_STAGE_B"] = {None: 0, "pad": 1, "transpose": 2}[staged.b]
    return out


def wgmma_source(problem: GemmProblem, config: Mapping[str, Value]) -> str:
    """The exact, self-contained translation unit compiled for this configuration."""
    head = f"// tracea gemm, family wgmma: {problem.label}, config {config_key(config)}\n"
    return head + "".join(f"#define {k} {v}\n" for k, v in defines(problem, config).items()) + headers_text(problem)


def _b_staged_shape(problem: GemmProblem) -> tuple[str, str]:
    """(rows, cols) of B as staged: K x N where nn's B is padded in its own shape (read N-major as in place); N x K
    where nt's B is padded or tf32 nn's is transposed (read K-major)."""
    return ("K", "N") if problem.layout == "nn" and hs.staging(problem).b == "pad" else ("N", "K")


def _scratch(problem: GemmProblem) -> tuple[Scratch, ...]:
    """The scratch buffers of the staging pre-pass: A (M x K) with a padded leading dimension; B padded in its own
    layout (N x K in nt, K x N in nn) or transposed from K x N to N x K (tf32 nn)."""
    staged = hs.staging(problem)
    common = {"ld_multiple": hs.staged_ld_multiple(problem.dtype), "elem_bytes": hs.elem_bytes(problem.dtype),
              "align_bytes": SCRATCH_ALIGN_BYTES}
    out = []
    if staged.pad_a:
        out.append(Scratch(name="A_staged", source="A", transposed=False, rows="M", cols="K", ld="lda_staged",
                           **common))
    if staged.b is not None:
        rows, cols = _b_staged_shape(problem)
        out.append(Scratch(name="B_staged", source="B", transposed=staged.b == "transpose", rows=rows, cols=cols,
                           ld="ldb_staged", **common))
    return tuple(out)


def _stage_steps(problem: GemmProblem) -> list[KernelStep]:
    """Kernel steps of the staging pre-pass; they run before gemm_wgmma on the same stream."""
    staged = hs.staging(problem)
    per_block = STAGE_COPY_BYTES // hs.elem_bytes(problem.dtype)  # columns one block of the copy moves
    block = (STAGE_THREADS, 1, 1)

    def copy_grid(rows: str, cols: str) -> tuple[str, str, int]:
        return f"{rows.lower()}/{STAGE_COPY_ROWS}", f"{cols.lower()}/{per_block}", 1

    steps = []
    if staged.pad_a:
        steps.append(KernelStep(STAGE_A_NAME, grid=copy_grid("M", "K"), block=block,
                                params=("A", "A_staged", "M", "K", "lda", "lda_staged")))
    if staged.b is not None:
        rows, cols = _b_staged_shape(problem)
        grid = (f"n/{STAGE_TILE}", f"k/{STAGE_TILE}", 1) if staged.b == "transpose" else copy_grid(rows, cols)
        steps.append(KernelStep(STAGE_B_NAME, grid=grid, block=block,
                                params=("B", "B_staged", rows, cols, "ldb", "ldb_staged")))
    return steps


def _tensor_maps(problem: GemmProblem, config: Mapping[str, Value]) -> dict[str, TensorMap]:
    tk = hs.tile_k(problem.dtype)
    cluster = int(config["cluster_m"])
    staged = hs.staging(problem)
    elem = hs.elem_bytes(problem.dtype)
    chunk = hs.SWIZZLE_BYTES // elem
    a = ("A_staged", "lda_staged") if staged.pad_a else ("A", "lda")
    b_name, b_ld = ("B_staged", "ldb_staged") if staged.b is not None else ("B", "ldb")
    if problem.layout == "nt" or staged.b == "transpose":  # N x K: read K-major
        b = TensorMap(b_name, ("K", "N"), b_ld, (tk, int(config["tile_n"]) // cluster), problem.dtype, elem)
    else:  # K x N (in place, or staged with a padded N)
        b = TensorMap(b_name, ("N", "K"), b_ld, (chunk, tk // cluster), problem.dtype, elem)
    maps = {"map_a": TensorMap(a[0], ("K", "M"), a[1], (tk, int(config["tile_m"])), problem.dtype, elem), "map_b": b}
    if not hs.ragged_n(problem):  # C's rows are 16-byte strided: the kernel takes a map over C (used by store=tma)
        maps["map_c"] = TensorMap("C", ("N", "M"), "ldc", (chunk, hs.consumer_rows(config)),
                                  "fp32" if problem.dtype == "tf32" else problem.dtype, elem)
    return maps


def split_steps(split: int) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(the steps before the main kernel, the steps after it) that split-K adds: the workspace zeroed once, when it is
    allocated (the second pass leaves it zero), and the second pass over M x N; neither for split 1."""
    if split == 1:
        return (), ()
    return ((MemsetStep(elem_bytes=4, once=True),),
            (KernelStep(SPLITK_NAME, grid=(f"mn/{SPLITK_THREADS}", 1, 1), block=(SPLITK_THREADS, 1, 1),
                        params=SPLITK_PARAMS),))


def wgmma_launch(problem: GemmProblem, config: Mapping[str, Value]) -> LaunchPlan:
    """The staging steps (if any), split-K's zeroing (if any), the main kernel and split-K's second pass: params,
    tensor maps (innermost dimension first), grid rules, cluster, shared memory, and the scratch the staging writes.
    With split-K the work items are every tile's K slices: the cluster grid rules multiply by `split_k`. A K pair
    (cluster_k=2) launches its two CTAs as the grid's and the cluster's second dimension."""
    cluster = int(config["cluster_m"])
    split = hs.split_k_of(config)
    pair = hs.cluster_k_of(config)  # a K pair: the grid's and the cluster's second dimension
    main = KernelStep(KERNEL_NAME, grid=("persistent_clusters" if int(config["persistent"]) else "work_clusters", pair, 1),
                      block=(hs.threads(config), 1, 1), dynamic_smem_bytes=hs.smem_bytes(problem.dtype, config),
                      cluster=(cluster, pair, 1))
    params = tuple(p for p in PARAMS if p != "map_c") if hs.ragged_n(problem) else PARAMS  # see _tensor_maps
    before, after = split_steps(split)
    return LaunchPlan(
        steps=(*_stage_steps(problem), *before, main, *after), params=params,
        tensor_maps=_tensor_maps(problem, config), scratch=_scratch(problem), tile_m=int(config["tile_m"]),
        tile_n=int(config["tile_n"]), tile_k=hs.tile_k(problem.dtype), cluster_m=cluster,
        persistent=int(config["persistent"]), split_k=split if split > 1 else None,
        workspace_bytes_per_mn=4 if split > 1 else 0, alignment_bytes=hs.ALIGN_BYTES,
        element_aligned=RAGGED_N_ELEMENT_WISE if hs.ragged_n(problem) else (), family=hs.FAMILY, arch=ARCH,
        work="ceil(ceil(M/tile_m)/cluster_m) * ceil(N/tile_n)" + (" * split_k" if split > 1 else ""))


@dataclass(frozen=True)
class WgmmaFamily:
    name: str = hs.FAMILY
    backend: str = "cuda"

    def space(self, problem: GemmProblem, target: Target) -> SearchSpace | str:
        space = hs.hopper_space(problem, target)
        return space if space is not None else (hs.qualifies(problem, target) or "the wgmma family does not apply")

    def template(self, problem: GemmProblem) -> str:
        """The headers, whatever the dtype: they have been part of every CUDA GEMM key since the family came, and
        keys written then stay current."""
        return headers_text(problem)

    def source(self, problem: GemmProblem, config: Mapping[str, Value]) -> str:
        return wgmma_source(problem, config)

    def launch(self, problem: GemmProblem, config: Mapping[str, Value]) -> LaunchPlan:
        return wgmma_launch(problem, config)

    def args(self, problem: GemmProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
        """The engine's arguments: the staging kernels, tensor maps and the main kernel read from the same ones."""
        return gemm_args(problem, operands)

    def suggested(self, problem: GemmProblem, target: Target) -> list[dict[str, Value]]:
        return hs.suggested_configs(problem, target)

    def serves(self, built_for: GemmProblem, config: Mapping[str, Value], problem: GemmProblem) -> str | None:
        """A kernel built for `built_for` has the staging pre-pass that problem needs (wgmma_space.staging); it
        computes `problem` only where that staging covers what `problem` needs (staging an aligned operand is correct,
        only slower)."""
        if not hs.staging(built_for).covers(hs.staging(problem)):
            return (f"the kernel built for {built_for.label} has no staging pre-pass for what {problem.label} needs "
                    f"({hs.staging(problem)})")
        if hs.ragged_n(problem) and not hs.ragged_n(built_for):
            return (f"the kernel built for {built_for.label} stores C through a tensor map, which N={problem.n} "
                    "rules out")
        return None


WGMMA = WgmmaFamily()
