"""The CUDA engine's two template families: `simt` (FMA on CUDA cores: fp32 exact, fp64) and `mma` (mma.sync tensor
cores: fp16, bf16, tf32), kernels/cuda/gemm_simt.cuh and gemm_mma.cuh.

Both instantiate one C++ template per configuration (`source`), take the same parameters (TRACEA_GEMM_PARAMS in
gemm_common.cuh: A, B, C, bias, residual, workspace, M, N, K, lda, ldb, ldc) and launch one main kernel over the
output tiles, with split-K's workspace zeroed before it and reduced after it (`launch`). A configuration with
stage = 1 first copies the operands whose rows its vector width does not divide into padded scratch in the workspace
(kernels/cuda/gemm_stage_pad.cuh), and the main kernel reads the copies. Their space and hand-picked configurations
are in engine_space.py. Pure: no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tracea_cli.ops.dtypes import get_dtype
from tracea_cli.ops.gemm.families.engine_space import (
    FAMILIES,
    SPLITK_REDUCE_THREADS,
    STAGE_DEFAULT,
    STAGED_ROW_BYTES,
    b_rows_cols,
    cluster_k_of,
    gemm_space,
    gemv_prefetch,
    hand_picked,
    has_gemv,
    kernel_of,
    mma_passes,
    offers_staging,
    shown_config,
    slice_k_of,
    splitk_mode,
    staging,
    tiling,
)
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.launch import (
    SCRATCH_ALIGN_BYTES,
    KernelStep,
    LaunchPlan,
    MemsetStep,
    Scratch,
)
from tracea_cli.resources import kernel_source, kernel_translation_unit
from tracea_cli.space import SearchSpace, Value, config_key
from tracea_cli.target import Target

GENERATOR_VERSION = 1  # bump when the text `source` generates around the templates changes
MAIN_KERNEL = "gemm_main"
REDUCE_KERNEL = "gemm_splitk_reduce"
SUM_KERNEL = "gemm_splitk_sum"  # the gemv kernel's split-K pass: adds the slices' sums in order (no atomics)
PARAMS = ("A", "B", "C", "bias", "residual", "workspace", "M", "N", "K", "lda", "ldb", "ldc")  # TRACEA_GEMM_PARAMS
ELEMENT = {"fp32": "float", "tf32": "float", "fp16": "__half", "bf16": "__nv_bfloat16", "fp64": "double"}
STAGE_HEADER = "cuda/gemm_stage_pad.cuh"
STAGE_KERNELS = {"A": "gemm_stage_a", "B": "gemm_stage_b"}  # one entry per staged operand, the same copy
STAGE_THREADS = 256  # gemm_stage_pad.cuh: STAGE_THREADS (the generated source asserts it)
# C, bias and residual where N's rows are ragged for the loads (here vec, wgmma: 16 bytes): the epilogues move them one
# element at a time, so they need only their element's alignment
RAGGED_N_ELEMENT_WISE = ("C", "bias", "residual")


def template_text(family: str) -> str:
    return kernel_translation_unit(f"cuda/gemm_{family}.cuh")


def is_serial(config: Mapping[str, Value]) -> bool:
    """Whether the configuration is the gemv kernel summing its K slices in one launch (splitk_mode "serial")."""
    return kernel_of(config) == "gemv" and int(config["split_k"]) > 1 and splitk_mode(config) == "serial"


def _cluster_dims(config: Mapping[str, Value]) -> str:
    """The entry's compile-time cluster shape (an ordinary launch then makes the clusters), or nothing."""
    cluster = cluster_k_of(config)
    return f"__cluster_dims__(1, 1, {cluster}) " if cluster > 1 else ""


def _gemv_source(problem: GemmProblem, config: Mapping[str, Value]) -> str:
    """The simt family's GEMV-class kernel (kernels/cuda/gemm_gemv.cuh, its own translation unit)."""
    t = tiling(problem, config)
    serial = is_serial(config)
    args = [config[p] for p in ("block_m", "block_n", "block_k", "vec", "split_k")]
    args += [1] if gemv_prefetch(config) else []  # a trailing template argument at its default (0) is left out
    lines = [
        f"// Tracea CUDA GEMM ({problem.dtype}, layout {problem.layout}, epilogue {problem.epilogue})",
        f"// configuration {config_key(shown_config(config))}",
        template_text("gemv_serial" if serial else "gemv"),
        f"using Gemm = tracea::GemvGemm<{ELEMENT[problem.dtype]}, tracea::Layout::NN, "
        f"tracea::Epilogue::{problem.fused.template_name}, {', '.join(str(int(a)) for a in args)}>;",
        f'static_assert(Gemm::THREADS == {t.threads}, "block size differs from the launch description");',
        f'static_assert(Gemm::SMEM_BYTES == {t.smem_bytes}, "shared memory differs from the launch description");',
        f"extern \"C\" __global__ void __launch_bounds__(Gemm::THREADS) {MAIN_KERNEL}(TRACEA_GEMM_PARAMS) "
        f"{{ tracea::gemm_gemv{'_serial' if serial else ''}<Gemm>(TRACEA_GEMM_ARGS); }}",
    ]
    if int(config["split_k"]) > 1 and not serial:
        lines.append(f"extern \"C\" __global__ void __launch_bounds__({SPLITK_REDUCE_THREADS}) {SUM_KERNEL}"
                     f"(TRACEA_GEMM_PARAMS) {{ tracea::gemm_splitk_sum<Gemm>(TRACEA_GEMM_ARGS); }}")
    return "\n".join(lines) + "\n"


def gemm_source(problem: GemmProblem, config: Mapping[str, Value]) -> str:
    """The exact, self-contained CUDA source of one configuration (what is compiled, hashed and exported)."""
    family = str(config["family"])
    if family == "simt" and kernel_of(config) == "gemv":
        return _gemv_source(problem, config)
    t = tiling(problem, config)
    layout = "NN" if problem.layout == "nn" else "NT"
    head = (f"tracea::{'MmaGemm' if family == 'mma' else 'SimtGemm'}<{ELEMENT[problem.dtype]}, tracea::Layout::{layout}, "
            f"tracea::Epilogue::{problem.fused.template_name}, ")
    if family == "mma":
        args = [config[p] for p in ("block_m", "block_n", "block_k", "warp_m", "warp_n", "stages", "vec", "split_k", "group_m")]
        cluster, passes = cluster_k_of(config), mma_passes(problem.dtype)
        # trailing template arguments at their defaults (1) are left out: the instantiation of before they existed
        trailing = [slice_k_of(config), cluster, passes]
        while trailing and trailing[-1] == 1:
            trailing.pop()
        args += trailing
        entry, bounds = "tracea::gemm_mma<Gemm>", "Gemm::THREADS"
    else:
        args = [config[p] for p in ("block_m", "block_n", "block_k", "warp_m", "warp_n", "vec", "split_k", "group_m")]
        entry, bounds = "tracea::gemm_simt<Gemm>", "Gemm::THREADS, Gemm::MIN_BLOCKS"  # blocks per SM: see the template
    lines = [
        f"// Tracea CUDA GEMM ({problem.dtype}, layout {problem.layout}, epilogue {problem.epilogue})",
        f"// configuration {config_key(shown_config(config))}",
        template_text(family),
        f"using Gemm = {head}{', '.join(str(int(a)) for a in args)}>;",
        f'static_assert(Gemm::THREADS == {t.threads}, "block size differs from the launch description");',
        f'static_assert(Gemm::SMEM_BYTES == {t.smem_bytes}, "shared memory differs from the launch description");',
        f"extern \"C\" __global__ void __launch_bounds__({bounds}) {_cluster_dims(config)}{MAIN_KERNEL}(TRACEA_GEMM_PARAMS) "
        f"{{ {entry}(TRACEA_GEMM_ARGS); }}",
    ]
    if int(config["split_k"]) > 1:
        lines.append(f"extern \"C\" __global__ void __launch_bounds__({SPLITK_REDUCE_THREADS}) {REDUCE_KERNEL}"
                     f"(TRACEA_GEMM_PARAMS) {{ tracea::splitk_reduce<Gemm::T, Gemm::EPILOGUE>(TRACEA_GEMM_ARGS); }}")
    staged = staging(problem, config)
    if staged.any:
        lines.append(kernel_source(STAGE_HEADER))
        lines.append(f'static_assert(tracea::STAGE_THREADS == {STAGE_THREADS}, "the copy\'s block differs from its '
                     'launch description");')
        lines += [f"extern \"C\" __global__ void __launch_bounds__(tracea::STAGE_THREADS) {STAGE_KERNELS[operand]}"
                  f"(TRACEA_STAGE_PARAMS) {{ tracea::stage_pad(TRACEA_STAGE_ARGS(Gemm::T)); }}"
                  for operand, on in (("A", staged.a), ("B", staged.b)) if on]
    return "\n".join(lines) + "\n"


def _staged(problem: GemmProblem, config: Mapping[str, Value]) -> tuple[tuple[str, ...], tuple[KernelStep, ...],
                                                                           tuple[Scratch, ...]]:
    """The main kernel's parameters, the staging steps (before everything else) and their scratch: each staged
    operand is read from its padded copy (A_staged, lda_staged; B_staged, ldb_staged)."""
    staged = staging(problem, config)
    elem = get_dtype(problem.dtype).storage_bytes
    params, steps, scratch = list(PARAMS), [], []
    for operand, on in (("A", staged.a), ("B", staged.b)):
        if not on:
            continue
        rows, cols = ("M", "K") if operand == "A" else b_rows_cols(problem)
        copy, ld = f"{operand}_staged", f"ld{operand.lower()}_staged"
        params[params.index(operand)], params[params.index(f"ld{operand.lower()}")] = copy, ld
        grid = (f"{rows.lower()}/1", f"{cols.lower()}/{STAGE_THREADS}", 1)  # a block per 256 columns of a row
        steps.append(KernelStep(STAGE_KERNELS[operand], grid=grid, block=(STAGE_THREADS, 1, 1),
                                params=(operand, copy, rows, cols, f"ld{operand.lower()}", ld)))
        scratch.append(Scratch(name=copy, source=operand, transposed=False, rows=rows, cols=cols, ld=ld,
                               ld_multiple=STAGED_ROW_BYTES // elem, elem_bytes=elem, align_bytes=SCRATCH_ALIGN_BYTES))
    return tuple(params), tuple(steps), tuple(scratch)


def gemm_launch(problem: GemmProblem, config: Mapping[str, Value]) -> LaunchPlan:
    """Split-K's workspace zeroed, the main kernel over the output tiles (grid z: the K slices, or the blocks of a K
    cluster), split-K's reduction."""
    t = tiling(problem, config)
    split = int(config["split_k"])
    if config["family"] == "simt" and kernel_of(config) == "gemv":
        main = KernelStep(MAIN_KERNEL, grid=("tiles", 1, "split_k"), block=(t.threads, 1, 1),
                          dynamic_smem_bytes=t.smem_bytes)
        if is_serial(config):
            # One launch: the counters (first 4 bytes per element of C) zeroed once when the workspace is allocated
            # and left zero by every call, then the slices' parts (kernels/cuda/gemm_gemv_serial.cuh).
            return LaunchPlan(steps=(MemsetStep(elem_bytes=4, once=True), main), params=PARAMS,
                              tile_m=int(config["block_m"]), tile_n=int(config["block_n"]), split_k=split,
                              workspace_bytes_per_mn=4 * (split + 1), alignment_bytes=t.copy_bytes)
        # Each K slice writes its own M x N part of the workspace; the second pass adds them: no memset.
        steps = [main]
        if split > 1:
            steps.append(KernelStep(SUM_KERNEL, grid=(f"mn/{SPLITK_REDUCE_THREADS}", 1, 1),
                                    block=(SPLITK_REDUCE_THREADS, 1, 1)))
        return LaunchPlan(steps=tuple(steps), params=PARAMS, tile_m=int(config["block_m"]),
                          tile_n=int(config["block_n"]), split_k=split,
                          workspace_bytes_per_mn=4 * split if split > 1 else 0, alignment_bytes=t.copy_bytes)
    cluster = cluster_k_of(config)
    params, stage_steps, scratch = _staged(problem, config)
    steps: list[Any] = list(stage_steps)
    if split > 1:
        steps.append(MemsetStep(elem_bytes=4))
    steps.append(KernelStep(MAIN_KERNEL, grid=("tiles", 1, cluster if cluster > 1 else "split_k"),
                            block=(t.threads, 1, 1), dynamic_smem_bytes=t.smem_bytes))
    if split > 1:
        steps.append(KernelStep(REDUCE_KERNEL, grid=(f"mn/{SPLITK_REDUCE_THREADS}", 1, 1),
                                block=(SPLITK_REDUCE_THREADS, 1, 1)))
    # The vector loads' alignment, but for the staged operands (the runtime asks only element alignment of those) and,
    # where N is ragged for the vector width, for C, bias and residual: the epilogue then stores C's rows one element
    # at a time (its vector stores need ldc to be a multiple of their width) and reads bias and residual so.
    ragged_n = problem.n % int(config["vec"]) != 0
    return LaunchPlan(steps=tuple(steps), params=params, scratch=scratch, tile_m=int(config["block_m"]),
                      tile_n=int(config["block_n"]), split_k=split, workspace_bytes_per_mn=4 if split > 1 else 0,
                      alignment_bytes=t.copy_bytes, element_aligned=RAGGED_N_ELEMENT_WISE if ragged_n else ())


def gemm_args(problem: GemmProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
    """The values of TRACEA_GEMM_PARAMS (the workspace comes from the runtime) and the sizes grid rules read."""
    return {"A": operands["A"], "B": operands["B"], "C": operands["C"], "bias": operands.get("bias"),
            "residual": operands.get("residual"), "M": problem.m, "N": problem.n, "K": problem.k, "lda": problem.k,
            "ldb": problem.n if problem.layout == "nn" else problem.k, "ldc": problem.n}


def config_in(config: Mapping[str, Value], problem: GemmProblem) -> Mapping[str, Value]:
    """A configuration with `stage` where `problem` needs nothing copied for its `vec`: there it reads as stage 0 (or
    without `stage`, where problem's space has none); the kernel's copies of aligned rows are right, only not needed,
    so an export serves aligned sizes too (`serves` says which copies a kernel makes). The same for both families."""
    if "stage" not in config or staging(problem, config).any:
        return config
    rest = {k: v for k, v in config.items() if k != "stage"}
    return {**rest, "stage": STAGE_DEFAULT} if offers_staging(problem) else rest


@dataclass(frozen=True)
class TemplateFamily:
    """`simt` or `mma`: one of the engine's template families (ops/base.Family)."""

    name: str
    backend: str = "cuda"

    def space(self, problem: GemmProblem, target: Target) -> SearchSpace | str:
        if self.name not in FAMILIES[problem.dtype]:
            return f"the {self.name} family has no {problem.dtype} kernels"
        return gemm_space(problem, target, self.name)

    def template(self, problem: GemmProblem) -> str | None:
        if self.name not in FAMILIES[problem.dtype]:
            return None
        text = f"generator {GENERATOR_VERSION}\n{template_text(self.name)}"
        if self.name == "simt" and has_gemv(problem):  # the GEMV-class kernel is in this space: its source in the key
            text += template_text("gemv") + template_text("gemv_serial")
        if offers_staging(problem):  # likewise the staging copy, where `stage` is a parameter
            text += kernel_source(STAGE_HEADER)
        return text

    def source(self, problem: GemmProblem, config: Mapping[str, Value]) -> str:
        return gemm_source(problem, config)

    def launch(self, problem: GemmProblem, config: Mapping[str, Value]) -> LaunchPlan:
        return gemm_launch(problem, config)

    def args(self, problem: GemmProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
        return gemm_args(problem, operands)

    def suggested(self, problem: GemmProblem, target: Target) -> list[dict[str, Value]]:
        if self.name not in FAMILIES[problem.dtype]:
            return []
        return hand_picked(problem, target, limit=3, family=self.name)

    def config_in(self, config: Mapping[str, Value], problem: GemmProblem) -> Mapping[str, Value]:
        return config_in(config, problem)

    def serves(self, built_for: GemmProblem, config: Mapping[str, Value], problem: GemmProblem) -> str | None:
        """A staged kernel built for `built_for` copies the operands that problem's rows left unaligned; it computes
        `problem` only where it copies every operand `problem` needs copied (copying an aligned one is correct)."""
        built, needed = staging(built_for, config), staging(problem, config)
        missing = [name for name, need, has in (("A", needed.a, built.a), ("B", needed.b, built.b)) if need and not has]
        if missing:
            return (f"the kernel built for {built_for.label} has no staging copy of {' and '.join(missing)}, which "
                    f"{problem.label} needs for vec={config['vec']}")
        return None


SIMT = TemplateFamily("simt")
MMA = TemplateFamily("mma")
