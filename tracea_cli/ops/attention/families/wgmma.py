"""The CUDA FlashAttention-3-style family for sm_90a: one kernel per configuration, `fa3_forward` of
kernels/cuda/attention_wgmma.cuh (a producer warpgroup streaming Q once and K/V through a TMA + mbarrier ring,
consumer warpgroups of 64 query rows running S = Q·Kᵀ and O += P·V on wgmma, P from registers, online softmax in the
log2 domain), one block per (query block, batch·head). Its space and hand-picked configurations are in
wgmma_space.py. Pure: no GPU.

The translation unit is the GEMM Hopper family's kernel header without its entry point (its mbarrier, TMA,
descriptor and wgmma helpers, configured through the same WG_* defines), then the attention template with the fa2
header it shares the kernel ABI with (TRACEA_ATTENTION_PARAMS after three tensor maps). The dtype, head dim, mask and
lse are template parameters; sizes, heads and strides are run-time arguments. Grid rules read M = seq (query rows)
and N = batch·heads.

Export: the plan reads Q, K and V through 3-D tensor maps (kind tiled3d) whose outer dimension is batch·heads with
the head stride, which is right only where the batch stride is H head strides (the layout bhld packed): the plan
states that as `requires`, and the exported runtime refuses a call that breaks it (TRACEA_ERROR_UNSUPPORTED_LAYOUT).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping

from tracea_cli.ops.attention.families import wgmma_space as ws
from tracea_cli.ops.attention.families.fa2 import ELEMENT, fa2_args
from tracea_cli.ops.attention.families.fa2 import PARAMS as FA2_PARAMS
from tracea_cli.ops.attention.problem import AttentionProblem
from tracea_cli.ops.gemm.families import wgmma as gemm_wgmma
from tracea_cli.ops.gemm.families import wgmma_space as gemm_space
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.launch import KernelStep, LaunchPlan, Requirement, TensorMap
from tracea_cli.resources import kernel_translation_unit
from tracea_cli.space import SearchSpace, Value, config_key
from tracea_cli.target import Target

GENERATOR_VERSION = 1  # bump when the text `fa3_source` generates around the template changes
TEMPLATE = "cuda/attention_wgmma.cuh"
# The ping-pong schedule (pingpong = 1): attention_wgmma.cuh with it pasted in, then the consumers' ordered loop. Only
# pingpong configurations compile it, so every other configuration's source stays what it was before it existed.
PINGPONG_TEMPLATE = "cuda/attention_wgmma_pingpong.cuh"
KERNEL = "attention_fa3"
MAPS = ("map_q", "map_k", "map_v")
PARAMS = MAPS + FA2_PARAMS  # the tensor maps, then fa2's TRACEA_ATTENTION_PARAMS
# Where the GEMM kernel's producer and consumer begin (then its entry point): the attention translation unit has its
# own roles, so it takes the GEMM helpers only up to there, and the GEMM's roles can change without changing any fa3
# source (and so any fa3 cache key).
GEMM_ROLES = "// ---- the two roles "


@functools.lru_cache(maxsize=None)
def gemm_helpers_text() -> str:
    """The GEMM family's headers (as an aligned nt problem has them: no staging entries) up to its roles, the
    namespace closed. Raises RuntimeError where that text no longer has exactly one such section."""
    text = gemm_wgmma.headers_text(GemmProblem(m=64, n=64, k=64, dtype="fp16", layout="nt"))
    if text.count(GEMM_ROLES) != 1:
        raise RuntimeError(f"{gemm_wgmma.HEADER} has {text.count(GEMM_ROLES)} sections opening {GEMM_ROLES.strip()!r}, "
                           "not 1: the attention fa3 kernel cannot leave the GEMM's roles out")
    return text[: text.index(GEMM_ROLES)] + "}  // namespace wg\n"


@functools.lru_cache(maxsize=None)
def template_text(pingpong: bool = False) -> str:
    """The GEMM helpers, then kernels/cuda/attention_wgmma.cuh with its includes pasted in (pingpong: its ping-pong
    header, which includes it, instead)."""
    return gemm_helpers_text() + "\n" + kernel_translation_unit(PINGPONG_TEMPLATE if pingpong else TEMPLATE)


def defines(problem: AttentionProblem, config: Mapping[str, Value]) -> dict[str, int]:
    """The GEMM header's WG_* configuration for this tile (the template static_asserts that they agree)."""
    t = ws.tiling(problem, config)
    return {"WG_DTYPE": gemm_space.DTYPE_CODES[problem.dtype], "WG_TILE_M": t.block_m,
            "WG_TILE_N": int(config["block_n"]), "WG_STAGES": int(config["stages"]),
            "WG_CONSUMERS": int(config["consumers"]), "WG_CLUSTER_M": 1, "WG_PERSISTENT": 0, "WG_GROUP_M": 1,
            "WG_B_KMAJOR": 1, "WG_EPILOGUE": 0, "WG_STORE_TMA": 0, "WG_PINGPONG": 0}


def fa3_source(problem: AttentionProblem, config: Mapping[str, Value]) -> str:
    """The exact, self-contained CUDA source of one configuration (what is compiled, hashed and exported)."""
    p = problem
    t = ws.tiling(p, config)
    pingpong = ws.pingpong_of(config)
    flag = {True: "true", False: "false"}
    args = [str(p.head_dim), *(str(int(config[n])) for n in ("block_n", "stages", "consumers")),
            flag[ws.overlap_of(config)], flag[p.causal], flag[p.lse]]
    tile = f"tracea::Fa3<{', '.join(args)}>"
    # pingpong 0 is the schedule from before the parameter: its configuration line leaves it out, so the source of
    # such a configuration is byte for byte what it was (tests/engine_hopper/test_attention_wgmma_compile.py)
    shown = {k: v for k, v in config.items() if k != "pingpong" or pingpong}
    lines = [
        f"// Tracea CUDA attention, fa3 family ({p.dtype}, head dim {p.head_dim}, "
        f"{'causal' if p.causal else 'no mask'}{', lse' if p.lse else ''})",
        f"// configuration {config_key(shown)}",
        *(f"#define {k} {v}" for k, v in defines(p, config).items()),
        template_text(pingpong),
        f"using Tile = tracea::Fa3Pingpong<{tile}>;" if pingpong else f"using Tile = {tile};",
        *(PINGPONG_CONSUME if pingpong else ()),
        f'static_assert(Tile::THREADS == {t.threads}, "block size differs from the launch description");',
        f'static_assert(Tile::SMEM_BYTES == {t.smem_bytes}, "shared memory differs from the launch description");',
        f'static_assert(Tile::Q_BYTES == {t.q_bytes} && Tile::KV_BYTES == {t.kv_bytes}, '
        '"tile bytes differ from the tensor maps\' boxes");',
        f"static_assert(sizeof(Tile::T) == sizeof({ELEMENT[p.dtype]}), \"element type\");",
        f'extern "C" __global__ void __launch_bounds__(Tile::THREADS, 1) {KERNEL}(',
        "    const __grid_constant__ wg::TensorMap map_q, const __grid_constant__ wg::TensorMap map_k,",
        "    const __grid_constant__ wg::TensorMap map_v, TRACEA_ATTENTION_PARAMS) {",
        "  tracea::fa3_forward<Tile>(&map_q, &map_k, &map_v, TRACEA_ATTENTION_ARGS);",
        "}",
    ]
    return "\n".join(lines) + "\n"


# The consumers' loop of a ping-pong tile: fa3_forward calls fa3_consume<Tile>, specialised here.
PINGPONG_CONSUME = (
    "namespace tracea {",
    "template <> __device__ __forceinline__ void fa3_consume<Tile>(const Fa3Ring &ring, const Fa3Block &b,",
    "                                                            const AttentionArgs &args, int consumer) {",
    "  fa3_consume_pingpong<Tile>(ring, b, args, consumer);",
    "}",
    "}  // namespace tracea",
)


def tensor_maps(problem: AttentionProblem, config: Mapping[str, Value]) -> dict[str, TensorMap]:
    """Q as (D, seq, batch·heads) and K, V as (D, seq_k, batch·kv_heads), innermost first, with the row and head
    strides of the layout (B, H, L, D): head b·H + h starts at (b·H + h)·head stride, the batch stride being H head
    strides. Boxes of 64 columns (128 bytes, the swizzle's width) by block_m rows (Q) or block_n rows (K, V)."""
    p = problem
    t = ws.tiling(p, config)
    e = ws.ELEMENT_BYTES
    q = TensorMap("q", ("head_dim", "seq", "bh"), "", (ws.CHUNK, t.block_m, 1), p.dtype, e, kind="tiled3d",
                  strides=("q_sr", "q_sh"))
    kv = {"dims": ("head_dim", "seq_k", "kv_bh"), "row_stride": "", "box": (ws.CHUNK, int(config["block_n"]), 1),
          "dtype": p.dtype, "elem_bytes": e, "kind": "tiled3d", "strides": ("kv_sr", "kv_sh")}
    return {"map_q": q, "map_k": TensorMap("k", **kv), "map_v": TensorMap("v", **kv)}


# The maps merge (batch, head) into one dimension of the head stride: the batch stride must be H (H_kv) head strides.
REQUIRES = (Requirement("q_sb", ("heads", "q_sh")), Requirement("kv_sb", ("kv_heads", "kv_sh")))


def fa3_launch(problem: AttentionProblem, config: Mapping[str, Value]) -> LaunchPlan:
    """One kernel: grid x the query blocks of block_m rows (M = seq), y every (batch, head) pair (N = batch·heads);
    a producer warpgroup and `consumers` consumer warpgroups; built for sm_90a."""
    t = ws.tiling(problem, config)
    step = KernelStep(KERNEL, grid=(f"m/{t.block_m}", "n/1", 1), block=(t.threads, 1, 1),
                      dynamic_smem_bytes=t.smem_bytes)
    return LaunchPlan(steps=(step,), params=PARAMS, tensor_maps=tensor_maps(problem, config), tile_m=t.block_m,
                      alignment_bytes=t.copy_bytes, family=ws.FAMILY, arch=ws.ARCH, requires=REQUIRES)


def fa3_args(problem: AttentionProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
    """fa2's arguments (TRACEA_ATTENTION_PARAMS and the sizes its grid reads) and kv_bh, the K/V maps' outer size."""
    return {**fa2_args(problem, operands), "kv_bh": problem.batch * problem.kv_heads}


@dataclass(frozen=True)
class Fa3Family:
    """ops/base.Family for the FlashAttention-3-style kernel."""

    name: str = ws.FAMILY
    backend: str = "cuda"

    def space(self, problem: AttentionProblem, target: Target) -> SearchSpace | str:
        return ws.applies(problem, target) or ws.fa3_space(problem, target)

    def template(self, problem: AttentionProblem) -> str | None:
        if ws.applies(problem):
            return None
        return f"generator {GENERATOR_VERSION}\n{template_text(pingpong=True)}"  # every schedule's text

    def source(self, problem: AttentionProblem, config: Mapping[str, Value]) -> str:
        return fa3_source(problem, config)

    def launch(self, problem: AttentionProblem, config: Mapping[str, Value]) -> LaunchPlan:
        return fa3_launch(problem, config)

    def args(self, problem: AttentionProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
        return fa3_args(problem, operands)

    def suggested(self, problem: AttentionProblem, target: Target) -> list[dict[str, Value]]:
        return ws.hand_picked(problem, target, limit=3)

    def serves(self, built_for: AttentionProblem, config: Mapping[str, Value],
               problem: AttentionProblem) -> str | None:
        """The head dim is a template parameter: a kernel serves its own head dim only (any sizes else: tails are
        masked, key blocks counted on the device)."""
        if problem.head_dim != built_for.head_dim:
            return f"the kernel is built for head dim {built_for.head_dim}, not {problem.head_dim}"
        return None


FA3 = Fa3Family()
