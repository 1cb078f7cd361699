"""What every op's CPU (numba) family shares: the register-blocking arithmetic of its search space, and the Family
object, built from the op's own space, source, launch plan, arguments and picks. Pure description, as ops/base.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from tracea_cli.ops.launch import LaunchPlan
from tracea_cli.space import Param, SearchSpace, Value
from tracea_cli.target import Target

# SiLU over a span of a flat array, in place, for the families' epilogues: whole vectors of LANES (a module constant:
# the family's vector) through the runtime's `vsilu` (backends/numba_simd.py: a polynomial exp, about 1 ulp), the rest
# one element at a time through math.exp. A scalar math.exp per element cost more than the whole product on small
# problems (lowrank-mlp 512x512, rank 32: 0.59 of 0.96 ms). NaN stays NaN.
SILU_SPAN = '''
@njit(fastmath=FASTMATH, cache=CACHE)
def silu_span(v, start, stop):
    """v[start:stop] = v / (1 + exp(-v)) in place."""
    j = start
    while j + LANES <= stop:
        vstore(v, j, vsilu(vload(v, j, LANES)))
        j += LANES
    for k in range(j, stop):
        x = v[k]
        v[k] = x / (1.0 + math.exp(-x))
'''


# The widest-ISA ends of a CPU device class (doctor/profile.cpu_device_class: "model | N threads | isa") that have
# 512-bit vector registers (32 of them); "avx512" is how profiles of release 0.1.0 named them (cache keys keep it).
WIDE_VECTOR_ISAS = ("amx_tile", "avx512_fp16", "avx512_bf16", "avx512f", "avx512")
VECTOR_BYTES = 32  # one AVX2 register (ymm)
WIDE_VECTOR_BYTES = 64  # one AVX-512 register (zmm)
VECTOR_REGISTERS = {VECTOR_BYTES: 16, WIDE_VECTOR_BYTES: 32}  # ymm0-15, zmm0-31: what register rules count in


def has_512_bit_vectors(target: Target) -> bool:
    """Whether a CPU target has 512-bit vectors, read from the widest vector ISA its device class names (part of
    every cache key, so a space that depends on it is the same wherever the key is)."""
    return target.device_class.rsplit("|", 1)[-1].strip() in WIDE_VECTOR_ISAS


def widest_vector_bytes(target: Target) -> int:
    """The vector a target's kernels use where a family takes the widest it has: a zmm where it has 512-bit
    vectors, else a ymm (a zmm there would be two ymm, and a register rule counting zmm would be wrong by half)."""
    return WIDE_VECTOR_BYTES if has_512_bit_vectors(target) else VECTOR_BYTES


def vector_param(vector_bytes: int) -> Param:
    """The `vector` parameter of a family that takes the target's widest vector: one value, that width."""
    return Param("vector", (vector_bytes,), doc="bytes of the vector registers the micro-kernel uses (the target's "
                 "widest: 64, AVX-512's zmm, or 32, AVX2's ymm)", default=vector_bytes)


def lanes(dtype: str, vector_bytes: int) -> int:
    """Elements of `dtype` (fp32 or fp64) in one vector register of `vector_bytes`."""
    return vector_bytes // (4 if dtype == "fp32" else 8)


def vector_of(config: Mapping[str, Value], stored: int) -> int:
    """A configuration's vector bytes; `stored`: what one stored before the parameter existed ran with (each op's
    STORED_VECTOR)."""
    return int(config.get("vector", stored))


def thread_counts(available: int) -> tuple[int, ...]:
    """1, half the cores and all of them (deduplicated, ascending)."""
    available = max(1, available)
    return tuple(sorted({1, max(1, available // 2), available}))


def registers_for(mr: int, nr: int, dtype: str, vector_bytes: int) -> int:
    """Vector registers an MR×NR micro-kernel of `dtype` in vectors of `vector_bytes` keeps live: the accumulators,
    one row of the packed operand and one broadcast value."""
    vectors = nr // lanes(dtype, vector_bytes)
    return mr * vectors + vectors + 1


def covering(values: tuple[int, ...], extent: int, step: int = 1) -> int:
    """The smallest of `values` that holds `extent` rounded up to whole `step`s (else the largest)."""
    need = -(-extent // step) * step
    fitting = [v for v in values if v >= need]
    return min(fitting) if fitting else max(values)


@dataclass(frozen=True)
class NumbaFamily:
    """An op's numba family (ops/base.Family) from its own functions; `template_file` is the file whose text
    generates every kernel of it, `shared_templates` other files its generator takes text from (another op's
    micro-kernel): all are hashed into cache keys."""

    dtypes: tuple[str, ...]
    make_space: Callable[[Any, Target], SearchSpace]
    make_source: Callable[[Any, Mapping[str, Value]], str]
    make_launch: Callable[[Any, Mapping[str, Value]], LaunchPlan]
    make_args: Callable[[Any, Mapping[str, Any]], dict[str, Any]]
    picks: Callable[[Any, Target], list[dict[str, Value]]]
    template_file: Path
    name: str = "numba"
    backend: str = "cpu"
    shared_templates: tuple[Path, ...] = ()

    def space(self, problem: Any, target: Target) -> SearchSpace | str:
        if problem.dtype not in self.dtypes:
            return f"the cpu backend does {' and '.join(self.dtypes)}, not {problem.dtype}"
        return self.make_space(problem, target)

    def template(self, problem: Any) -> str | None:
        if problem.dtype not in self.dtypes:
            return None
        return "".join(path.read_text() for path in (self.template_file, *self.shared_templates))

    def source(self, problem: Any, config: Mapping[str, Value]) -> str:
        return self.make_source(problem, config)

    def launch(self, problem: Any, config: Mapping[str, Value]) -> LaunchPlan:
        return self.make_launch(problem, config)

    def args(self, problem: Any, operands: Mapping[str, Any]) -> dict[str, Any]:
        return self.make_args(problem, operands)

    def suggested(self, problem: Any, target: Target) -> list[dict[str, Value]]:
        """The two best hand-picked configurations."""
        return self.picks(problem, target)[:2] if problem.dtype in self.dtypes else []
