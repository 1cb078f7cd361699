"""The CPU conv2d search space (the numba implicit-GEMM family, families/numba.py): parameters and the rules between
them.

A configuration names the register tile (`mr` output pixels × `nr` output channels held in vector registers), the
vector width (`vector`: 32-byte ymm everywhere, 64-byte zmm where the target has AVX-512), the block of the implicit
GEMM one thread computes at a time (`mb` output pixels × `nb` output channels), the block of input channels summed
before the partial result goes back to the output (`cb`; the filter taps of those channels stay in cache), and the
threads.

Rules come from the register file (accumulators, one row of the packed filter and one broadcast must fit, or the
micro-kernel spills), and from the shape (a
tile or block larger than its dimension needs only repeats a smaller one; every thread gets at least one block).
Pure: no I/O, no randomness; the target contributes its thread count and whether it has 512-bit vectors (its device
class's widest ISA).

Only `mr`, `nr` and `vector` (with the dtype) select a compiled kernel; blocks, threads, the geometry and the
epilogue are run-time arguments, so a search compiles at most a few dozen kernels per dtype.
"""

from __future__ import annotations

from typing import Mapping

from tracea_cli.ops import numba_family
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.numba_family import (
    VECTOR_BYTES,
    VECTOR_REGISTERS,
    WIDE_VECTOR_BYTES,
    lanes,
    registers_for,
    thread_counts,
    vector_of,
)
from tracea_cli.ops.numba_family import covering as _covering
from tracea_cli.space import Config, Param, Rule, SearchSpace, Value
from tracea_cli.target import Target

DTYPES = ("fp32", "fp64")
MR = (2, 3, 4, 6, 8)
NR_VECTORS = (1, 2, 4)
# Every MB is a multiple of every MR; NB holds whole NR strips by rule (zmm's NR reaches 64 for fp32).
MB = (48, 96, 192, 384)
NB = (32, 64, 128, 256)
CB = (16, 32, 64, 128, 256)

STORED_VECTOR = VECTOR_BYTES  # what a configuration stored before `vector` existed ran with


def vectors(target: Target) -> tuple[int, ...]:
    """The vector widths (bytes) the target's kernels may use: ymm, and its widest where that is wider."""
    return tuple(sorted({VECTOR_BYTES, numba_family.widest_vector_bytes(target)}))


def _nr_values(dtype: str, widths: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted({v * lanes(dtype, w) for w in widths for v in NR_VECTORS}))


def _params(problem: Conv2dProblem, threads: int, widths: tuple[int, ...]) -> tuple[Param, ...]:
    return (
        Param("mr", MR, doc="output pixels of the register tile"),
        Param("nr", _nr_values(problem.dtype, widths),
              doc="output channels of the register tile (1, 2 or 4 vectors)"),
        Param("vector", widths, doc="bytes of the vector registers the micro-kernel uses (64: AVX-512's zmm)",
              default=VECTOR_BYTES),
        Param("mb", MB, doc="output pixels (N·P·Q) per block"),
        Param("nb", NB, doc="output channels (K) per block"),
        Param("cb", CB, doc="input channels (C) summed per pass over a block"),
        Param("threads", thread_counts(threads), doc="threads of numba's pool"),
    )


def _rules(problem: Conv2dProblem, widths: tuple[int, ...]) -> tuple[Rule, ...]:
    m, k, c_in = problem.gemm_m, problem.k, problem.c
    nr_values = _nr_values(problem.dtype, widths)

    def whole_vectors(c) -> str | None:
        width = lanes(problem.dtype, vector_of(c, STORED_VECTOR))
        if int(c["nr"]) % width or int(c["nr"]) // width not in NR_VECTORS:
            return (f"nr={c['nr']} is not 1, 2 or 4 vectors of {width} {problem.dtype} lanes "
                    f"(vector={vector_of(c, STORED_VECTOR)} bytes)")
        if int(c["nb"]) % int(c["nr"]):  # the driver starts a packed strip of the filter at every block
            return f"nb={c['nb']} is not a whole number of nr={c['nr']} strips"
        return None

    def register_file(c) -> str | None:
        vector = vector_of(c, STORED_VECTOR)
        needed = registers_for(int(c["mr"]), int(c["nr"]), problem.dtype, vector)
        if needed > VECTOR_REGISTERS[vector]:
            return (f"a {c['mr']}x{c['nr']} register tile needs {needed} vector registers (accumulators, a row of the "
                    f"filter, a broadcast of the input); more than {VECTOR_REGISTERS[vector]} spill")
        return None

    def tile_fits_problem(c) -> str | None:
        for name, size, dim, values in (("mr", m, "N·P·Q", MR), ("nr", k, "K", nr_values)):
            cover = _covering(values, size)
            if c[name] > cover:
                return f"{name}={c[name]} is larger than {dim}={size} needs; {name}={cover} already covers it"
        return None

    def blocks_fit_problem(c) -> str | None:
        for name, size, dim, values, step in (("mb", m, "N·P·Q", MB, int(c["mr"])), ("nb", k, "K", NB, int(c["nr"])),
                                              ("cb", c_in, "C", CB, 1)):
            cover = _covering(tuple(v for v in values if v % step == 0) or values, size, step)
            if c[name] > cover:
                return f"{name}={c[name]} is larger than {dim}={size} needs; {name}={cover} already covers it"
        return None

    def every_thread_has_work(c) -> str | None:
        threads = int(c["threads"])
        blocks = -(-m // c["mb"]) * -(-k // c["nb"])
        if threads > 1 and blocks < threads:
            return (f"mb={c['mb']} and nb={c['nb']} make {blocks} block(s) of the {m}x{k} output: fewer than "
                    f"threads={threads}, so a thread would idle")
        return None

    return whole_vectors, register_file, tile_fits_problem, blocks_fit_problem, every_thread_has_work


def conv2d_space(problem: Conv2dProblem, target: Target) -> SearchSpace:
    """The CPU conv2d configurations for `problem` (fp32 or fp64) on a target with `target.threads` threads (and
    64-byte vectors where it has AVX-512)."""
    if problem.dtype not in DTYPES:
        raise ValueError(f"the CPU kernels do {' and '.join(DTYPES)}, not {problem.dtype}")
    widths = vectors(target)
    return SearchSpace(params=_params(problem, target.threads or 1, widths), rules=_rules(problem, widths))


# Register tile (mr, vectors of nr) and blocks (mb, nb) of the hand-picked configurations, best guesses first.
_PICKS = ((6, 2, 96, 64), (4, 2, 96, 64), (3, 4, 96, 64), (8, 1, 96, 64), (2, 4, 48, 64), (4, 1, 48, 32))


def hand_picked(problem: Conv2dProblem, target: Target) -> list[Config]:
    """A few sensible configurations, all valid in the problem's space, best guesses first. For each register tile
    of `_PICKS`, in the widest vectors the target has (AVX-512's zmm: 1.2-1.5x the ymm kernels on the 2-core
    development machine, docs/results/cpu_conv2d.md): the valid configuration with the most threads, the blocks
    closest to the pick's and the largest C block (the whole C where it fits); then the same on one thread."""
    space = conv2d_space(problem, target)
    vector = numba_family.widest_vector_bytes(target)
    width = lanes(problem.dtype, vector)
    valid = space.valid_configs()
    picks: list[Config] = []
    for mr, count, mb, nb in _PICKS:
        same_tile = [c for c in valid if c["mr"] == mr and c["nr"] == count * width and c["vector"] == vector]
        if not same_tile:
            continue
        best = min(same_tile, key=lambda c: (-int(c["threads"]), abs(int(c["mb"]) - mb), abs(int(c["nb"]) - nb),
                                              -int(c["cb"])))
        if best not in picks:
            picks.append(best)
    # then each pick on one thread: on a busy machine a parallel call waits for its slowest thread, one thread never
    single = [{**c, "threads": 1} for c in picks if int(c["threads"]) > 1]
    return picks + [c for c in single if space.why_invalid(c) is None and c not in picks]


def describe(config: Mapping[str, Value]) -> str:
    """A short human label: "6x16 mb96 nb64 cb64 t2" (and " zmm" with 64-byte vectors)."""
    return (f"{config['mr']}x{config['nr']} mb{config['mb']} nb{config['nb']} cb{config['cb']} t{config['threads']}"
            + (" zmm" if vector_of(config, STORED_VECTOR) == WIDE_VECTOR_BYTES else ""))
