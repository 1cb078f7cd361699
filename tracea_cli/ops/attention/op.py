"""The attention operation as the registry serves it: options, families, baselines, inputs, reference, suites and
graph binding."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from tracea_cli.errors import UsageError
from tracea_cli.ops.attention import problem as ap
from tracea_cli.ops.attention.baselines import BASELINES
from tracea_cli.ops.attention.export.abi import ABI
from tracea_cli.ops.attention.families.fa2 import FA2
from tracea_cli.ops.attention.families.numba import NUMBA
from tracea_cli.ops.attention.families.wgmma import FA3
from tracea_cli.ops.attention.graph import GRAPH
from tracea_cli.ops.attention.problem import AttentionProblem
from tracea_cli.ops.attention.suites import suite
from tracea_cli.ops.base import Baseline, Option, Tensor, resolve_options

#: the dtypes each backend's kernels run, the softmax statistics always in fp32
DTYPES_BY_BACKEND = {"cuda": ("fp16", "bf16"), "cpu": ("fp32", "fp64")}


def dtypes_of(families: tuple[Any, ...]) -> dict[str, tuple[str, ...]]:
    """DTYPES_BY_BACKEND for the backends some family of `families` runs on."""
    return {b: d for b, d in DTYPES_BY_BACKEND.items() if any(f.backend == b for f in families)}


def baselines_on(baselines: tuple[Baseline, ...], dtypes: Mapping[str, Any]) -> tuple[Baseline, ...]:
    """`baselines` on the backends of `dtypes` only (those with none left out)."""
    kept = (replace(b, backends=tuple(x for x in b.backends if x in dtypes)) for b in baselines)
    return tuple(b for b in kept if b.backends)


class AttentionOp:
    name = ap.OP_NAME
    summary = "out = softmax(Q·Kᵀ/sqrt(D) + mask)·V: fused attention, causal or not, grouped-query heads."
    options = (
        Option("batch", int, "Batch size B.", default=1, size=True),
        Option("heads", int, "Query heads H.", required=True, size=True),
        Option("seq", int, "Query rows per head, L_q.", required=True, size=True),
        Option("head_dim", int, "Head dimension D: " + ", ".join(map(str, ap.HEAD_DIMS)) + ".", required=True,
               size=True),
        Option("kv_heads", int, "Key/value heads H_kv (grouped-query attention; must divide heads; default: heads).",
               default_from="heads", size=True),
        Option("seq_k", int, "Key/value rows per head, L_k (cross attention, a KV cache; default: seq).",
               default_from="seq", size=True),
        Option("dtype", str, "bf16 | fp16 on cuda, fp32 | fp64 on the cpu backend; softmax statistics in fp32.",
               default="bf16", choices=ap.DTYPES),
        Option("causal", bool, "Causal mask, aligned bottom-right: query row i sees keys j <= i + (seq_k - seq).",
               default=False),
        Option("layout", str, "bhld: (B, H, L, D), as torch passes tensors to scaled_dot_product_attention; blhd: "
               "(B, L, H, D). K and V alike with kv_heads.", default="bhld", choices=ap.LAYOUTS),
        Option("lse", bool, "Also write each row's log-sum-exp of its scaled scores (fp32, B x H x seq).",
               default=False),
    )
    epilogues = ()
    # In order of preference: the FA3-style family where it applies (sm_90a, (B, H, L, D), prefill), then FA2.
    families = (FA3, FA2, NUMBA)
    dtypes = dtypes_of(families)  # a backend's dtypes once a family of it is in `families`
    baselines = baselines_on(BASELINES, dtypes)  # those of the backends above
    export = ABI  # the C ABI: export/abi.py, tracea_attention.h
    graph = GRAPH

    def problem(self, **values: Any) -> AttentionProblem:
        # The Python API's graphs name the fused epilogue of every op node; attention fuses none.
        epilogue = values.pop("epilogue", "none")
        if epilogue != "none":
            raise UsageError(f"attention fuses no epilogue, not {epilogue!r}.", "Run the pointwise work after it.")
        return AttentionProblem(**resolve_options(self.name, self.options, values))

    def from_key(self, dtype: str, key: Mapping[str, Any]) -> AttentionProblem:
        return AttentionProblem.from_key(dtype, key)

    def tensors(self, problem: AttentionProblem) -> tuple[Tensor, ...]:
        return problem.tensors()

    def make_inputs(self, problem: AttentionProblem, rng: Any) -> dict[str, Any]:
        return ap.make_inputs(problem, rng)

    def reference(self, problem: AttentionProblem, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return ap.reference(problem, inputs)

    def suite(self, name: str, backend: str, dtypes: tuple[str, ...]) -> tuple[AttentionProblem, ...]:
        return suite(name, backend, dtypes)


OP = AttentionOp()
