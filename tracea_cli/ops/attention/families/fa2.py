"""The CUDA FlashAttention-2-style family: one kernel per configuration, `fa2_forward` of
kernels/cuda/attention_fa2.cuh (mma.sync m16n8k16, online softmax in the log2 domain, Q split across warps, K/V
through a cp.async pipeline, causal blocks skipped), one block per (query block, batch·head). Its space and
hand-picked configurations are in fa2_space.py. Pure: no GPU.

The template is instantiated with the dtype, the head dim, the mask and whether lse is written; sizes, heads and the
layout (as element strides) are run-time arguments (TRACEA_ATTENTION_PARAMS). Grid rules read M = seq (query rows),
N = batch·heads and K = seq_k.

With kv_splits > 1 (split-KV) a configuration is two kernels of kernels/cuda/attention_fa2_split.cuh instead:
`attention_fa2_split` (grid z the key chunks, partial O and lse into the fp32 workspace) and `attention_fa2_combine`
(one warp per output row). With pack_gqa = 1 the split kernel's blocks are one per (query block of the G·L_q packed
rows, batch·kv_heads): grid x the rule m/(block_m / G) (block_m a multiple of G: ceil(G·L_q / block_m) exactly), y
n/G; the combine is unchanged. That header is its own translation unit, pasted only into split configurations' sources
and hashed only into the cache keys of problems whose space has split-KV (fa2_space.admits_split): every other
attention key is the one it was before split-KV existed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping

from tracea_cli.ops.attention.families.fa2_space import (
    FAMILY,
    admits_split,
    applies,
    fa2_space,
    group_of,
    hand_picked,
    kv_splits_of,
    pack_of,
    tiling,
)
from tracea_cli.ops.attention.problem import AttentionProblem, check_operands
from tracea_cli.ops.launch import KernelStep, LaunchPlan
from tracea_cli.resources import kernel_translation_unit
from tracea_cli.space import SearchSpace, Value, config_key
from tracea_cli.target import Target

GENERATOR_VERSION = 1  # bump when the text `fa2_source` generates around the template changes
TEMPLATE = "cuda/attention_fa2.cuh"
SPLIT_TEMPLATE = "cuda/attention_fa2_split.cuh"
KERNEL = "attention_fa2"
SPLIT_KERNEL = "attention_fa2_split"
COMBINE_KERNEL = "attention_fa2_combine"
# TRACEA_ATTENTION_PARAMS: the pointers by tensor name, then sizes and (batch, head, row) element strides (out has
# q's, v has k's)
PARAMS = ("q", "k", "v", "out", "lse", "seq", "seq_k", "heads", "kv_heads", "q_sb", "q_sh", "q_sr", "kv_sb",
          "kv_sh", "kv_sr")
SPLIT_PARAMS = PARAMS + ("workspace",)  # TRACEA_ATTENTION_SPLIT_PARAMS (16: the exported runtime's most)
COMBINE_WARPS = 4  # output rows per block of the combine (the template's Fa2Split::COMBINE_WARPS)
ELEMENT = {"fp16": "__half", "bf16": "__nv_bfloat16"}


@functools.lru_cache(maxsize=None)
def template_text(split: bool = False) -> str:
    """kernels/cuda/attention_fa2.cuh (`split`: attention_fa2_split.cuh, which includes it) with the GEMM engine's PTX
    wrappers pasted in: one translation unit."""
    return kernel_translation_unit(SPLIT_TEMPLATE if split else TEMPLATE)


def fa2_source(problem: AttentionProblem, config: Mapping[str, Value]) -> str:
    """The exact, self-contained CUDA source of one configuration (what is compiled, hashed and exported)."""
    p = problem
    t = tiling(p, config)
    splits = kv_splits_of(config)
    flag = {True: "true", False: "false"}
    args = [ELEMENT[p.dtype], str(p.head_dim), *(str(int(config[n])) for n in ("block_m", "block_n", "warps",
                                                                              "stages")),
            flag[p.causal], flag[p.lse]]
    # kv_splits = 1 and pack_gqa = 0 are the configuration as it was before the parameter existed: the same text,
    # byte for byte
    shown = {n: v for n, v in config.items()
             if not (n == "kv_splits" and splits == 1) and not (n == "pack_gqa" and not pack_of(config))}
    forward = f"{splits}, true" if pack_of(config) else f"{splits}"
    lines = [
        f"// Tracea CUDA attention, fa2 family ({p.dtype}, head dim {p.head_dim}, "
        f"{'causal' if p.causal else 'no mask'}{', lse' if p.lse else ''})",
        f"// configuration {config_key(shown)}",
        template_text(split=splits > 1),
        f"using Tile = tracea::Fa2<{', '.join(args)}>;",
        f'static_assert(Tile::THREADS == {t.threads}, "block size differs from the launch description");',
        f'static_assert(Tile::SMEM_BYTES == {t.smem_bytes}, "shared memory differs from the launch description");',
    ]
    if splits == 1:
        lines.append(f'extern "C" __global__ void __launch_bounds__(Tile::THREADS) {KERNEL}(TRACEA_ATTENTION_PARAMS) '
                     "{ tracea::fa2_forward<Tile>(TRACEA_ATTENTION_ARGS); }")
    else:
        lines += [
            f"using Split = tracea::Fa2Split<Tile, {splits}>;",
            f'static_assert(Split::COMBINE_WARPS == {COMBINE_WARPS}, "combine rows differ from the launch plan");',
            f'extern "C" __global__ void __launch_bounds__(Tile::THREADS) {SPLIT_KERNEL}'
            f"(TRACEA_ATTENTION_SPLIT_PARAMS) {{ tracea::fa2_split_forward<Tile, {forward}>(TRACEA_ATTENTION_ARGS, "
            "workspace); }",
            f'extern "C" __global__ void __launch_bounds__(Split::COMBINE_THREADS) {COMBINE_KERNEL}'
            f"(TRACEA_ATTENTION_SPLIT_PARAMS) {{ tracea::fa2_split_combine<Tile, {splits}>(TRACEA_ATTENTION_ARGS, "
            "workspace); }",
        ]
    return "\n".join(lines) + "\n"


def fa2_launch(problem: AttentionProblem, config: Mapping[str, Value]) -> LaunchPlan:
    """One kernel: grid x the query blocks (M = seq), y every (batch, head) pair (N = batch·heads). With split-KV,
    that kernel with grid z the key chunks, writing the workspace (kv_splits·(D + 1) floats per query row and
    (batch, head): M x N x workspace_bytes_per_mn, every byte written before it is read, so no memset), then the
    combine, a warp per output row (grid x the query rows by COMBINE_WARPS, y batch·heads). Packed (pack_gqa = 1), the
    split kernel's grid is x ceil(G·seq / block_m) = ceil(seq / (block_m / G)), y batch·kv_heads = N / G."""
    t = tiling(problem, config)
    bm, splits = int(config["block_m"]), kv_splits_of(config)
    if splits == 1:
        return LaunchPlan(steps=(KernelStep(KERNEL, grid=(f"m/{bm}", "n/1", 1), block=(t.threads, 1, 1),
                                            dynamic_smem_bytes=t.smem_bytes),),
                          params=PARAMS, tile_m=bm, alignment_bytes=t.copy_bytes, family=FAMILY)
    group = group_of(problem) if pack_of(config) else 1
    steps = (KernelStep(SPLIT_KERNEL, grid=(f"m/{bm // group}", f"n/{group}", splits), block=(t.threads, 1, 1),
                        dynamic_smem_bytes=t.smem_bytes),
             KernelStep(COMBINE_KERNEL, grid=(f"m/{COMBINE_WARPS}", "n/1", 1), block=(COMBINE_WARPS * 32, 1, 1)))
    return LaunchPlan(steps=steps, params=SPLIT_PARAMS, tile_m=bm, alignment_bytes=t.copy_bytes, family=FAMILY,
                      workspace_bytes_per_mn=t.workspace_bytes_per_row)


def fa2_args(problem: AttentionProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
    """The values of TRACEA_ATTENTION_PARAMS (lse null unless the problem has it) and the sizes the grid reads."""
    p = problem
    check_operands(p, operands)
    q_s, kv_s = p.strides("q"), p.strides("k")
    values: dict[str, Any] = {"q": operands["q"], "k": operands["k"], "v": operands["v"], "out": operands["out"],
                              "lse": operands.get("lse") if p.lse else None,
                              "M": p.seq, "N": p.batch * p.heads, "K": p.seq_k,
                              "seq": p.seq, "seq_k": p.seq_k, "bh": p.batch * p.heads, "heads": p.heads,
                              "kv_heads": p.kv_heads, "batch": p.batch, "head_dim": p.head_dim}
    for prefix, strides in (("q", q_s), ("kv", kv_s)):
        for axis, stride in zip(("sb", "sh", "sr"), strides):
            values[f"{prefix}_{axis}"] = stride
    return values


@dataclass(frozen=True)
class Fa2Family:
    """ops/base.Family for the FlashAttention-2-style kernel."""

    name: str = FAMILY
    backend: str = "cuda"

    def space(self, problem: AttentionProblem, target: Target) -> SearchSpace | str:
        return applies(problem) or fa2_space(problem, target)

    def template(self, problem: AttentionProblem) -> str | None:
        if applies(problem):
            return None
        text = f"generator {GENERATOR_VERSION}\n{template_text()}"
        if admits_split(problem):  # split-KV is in this problem's space: its header is in the key too
            text += template_text(split=True)
        return text

    def source(self, problem: AttentionProblem, config: Mapping[str, Value]) -> str:
        return fa2_source(problem, config)

    def launch(self, problem: AttentionProblem, config: Mapping[str, Value]) -> LaunchPlan:
        return fa2_launch(problem, config)

    def args(self, problem: AttentionProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
        return fa2_args(problem, operands)

    def suggested(self, problem: AttentionProblem, target: Target) -> list[dict[str, Value]]:
        return [] if applies(problem) else hand_picked(problem, target, limit=3)

    def serves(self, built_for: AttentionProblem, config: Mapping[str, Value],
               problem: AttentionProblem) -> str | None:
        """The head dim is a template parameter: a kernel serves its own head dim only; a packed one (pack_gqa = 1)
        its own query heads per K/V head too (its grid rules divide by that group)."""
        if problem.head_dim != built_for.head_dim:
            return f"the kernel is built for head dim {built_for.head_dim}, not {problem.head_dim}"
        if pack_of(config) and group_of(problem) != group_of(built_for):
            return (f"the packed kernel's grid is built for {group_of(built_for)} query heads per K/V head, not "
                    f"{group_of(problem)}")
        return None


FA2 = Fa2Family()
