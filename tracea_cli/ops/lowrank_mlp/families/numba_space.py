"""The CPU lowrank-mlp search space (the numba two-phase family, families/numba.py): parameters and the rules between
them.

A configuration names the register tile (`mr` rows × `nr` columns held in vector registers: of T in the first phase,
of y in the second), the block of rows of x a thread takes at a time (`mb`: its rows of T stay in that thread's own
buffer between the two phases), the depth of d_in summed per pass over the block (`kc`: the rows of the packed U
panel that stay in cache), and the threads.

Rules come from the register file (accumulators, one row of the packed operand and one broadcast must fit, or the
micro-kernel spills) and from the shape (a tile or block larger than its dimension needs only repeats a smaller
one; every thread gets at least one block). Pure: no I/O, no randomness; the target contributes its thread count and
its widest vector (`vector`: 64 bytes with AVX-512, else 32). Only `mr`, `nr` and `vector` (with the dtype) select a
compiled kernel; the rest, and the problem's layout and epilogue, are run-time arguments.
"""

from __future__ import annotations

from tracea_cli.ops import numba_family
from tracea_cli.ops.lowrank_mlp.problem import LowrankMlpProblem
from tracea_cli.ops.numba_family import (
    VECTOR_BYTES,
    VECTOR_REGISTERS,
    covering,
    lanes,
    registers_for,
    thread_counts,
)
from tracea_cli.space import Config, Param, Rule, SearchSpace
from tracea_cli.target import Target

DTYPES = ("fp32", "fp64")
MR = (2, 3, 4, 6, 8)
NR_VECTORS = (1, 2, 4)
MB = (24, 48, 96, 192)  # multiples of every MR: a block holds whole register tiles
KC = (128, 256, 512)

STORED_VECTOR = VECTOR_BYTES  # what a configuration stored before `vector` existed ran with


def _params(problem: LowrankMlpProblem, threads: int, vector: int) -> tuple[Param, ...]:
    width = lanes(problem.dtype, vector)
    return (
        Param("mr", MR, doc="rows of the register tile"),
        Param("nr", tuple(v * width for v in NR_VECTORS), doc=f"columns of the register tile ({width} per vector)"),
        numba_family.vector_param(vector),
        Param("mb", MB, doc="rows of x (and of T, kept per thread) per block"),
        Param("kc", KC, doc="depth of d_in summed per pass over a block"),
        Param("threads", thread_counts(threads), doc="threads of numba's pool"),
    )


def _rules(problem: LowrankMlpProblem, vector: int) -> tuple[Rule, ...]:
    m, d_in = problem.m, problem.d_in
    widest = max(problem.rank, problem.d_out)  # nr strips both T's columns (rank) and y's (d_out)
    nr_values = tuple(v * lanes(problem.dtype, vector) for v in NR_VECTORS)

    def register_file(c) -> str | None:
        needed = registers_for(int(c["mr"]), int(c["nr"]), problem.dtype, vector)
        if needed > VECTOR_REGISTERS[vector]:
            return (f"a {c['mr']}x{c['nr']} register tile needs {needed} vector registers of {vector} bytes "
                    f"(accumulators, a row of the packed operand, a broadcast); more than {VECTOR_REGISTERS[vector]} "
                    "spill")
        return None

    def tile_fits_problem(c) -> str | None:
        for name, size, what, values in (("mr", m, "M", MR), ("nr", widest, "max(rank, d_out)", nr_values)):
            cover = covering(values, size)
            if c[name] > cover:
                return f"{name}={c[name]} is larger than {what}={size} needs; {name}={cover} already covers it"
        return None

    def blocks_fit_problem(c) -> str | None:
        mb_cover = covering(MB, m, int(c["mr"]))
        if c["mb"] > mb_cover:
            return f"mb={c['mb']} is larger than M={m} needs; mb={mb_cover} already covers it"
        kc_cover = covering(KC, d_in)
        if c["kc"] > kc_cover:
            return f"kc={c['kc']} is deeper than d_in={d_in} needs; kc={kc_cover} already covers it"
        return None

    def every_thread_has_work(c) -> str | None:
        threads, blocks = int(c["threads"]), -(-m // c["mb"])
        if threads > 1 and blocks < threads:
            return (f"mb={c['mb']} makes {blocks} block(s) of M={m} rows: fewer than threads={threads}, so a thread "
                    "would idle")
        return None

    return register_file, tile_fits_problem, blocks_fit_problem, every_thread_has_work


def lowrank_space(problem: LowrankMlpProblem, target: Target) -> SearchSpace:
    """The CPU configurations for `problem` (fp32 or fp64) on a target with `target.threads` threads."""
    if problem.dtype not in DTYPES:
        raise ValueError(f"the CPU kernels do {' and '.join(DTYPES)}, not {problem.dtype}")
    vector = numba_family.widest_vector_bytes(target)
    return SearchSpace(params=_params(problem, target.threads or 1, vector), rules=_rules(problem, vector))


# Register tile (mr, vectors of nr), mb and kc of the hand-picked configurations, best guesses first.
_PICKS = ((6, 2, 48, 256), (4, 2, 48, 256), (4, 4, 48, 256), (8, 1, 96, 256), (3, 4, 24, 128), (2, 2, 24, 128))


def hand_picked(problem: LowrankMlpProblem, target: Target) -> list[Config]:
    """A few sensible configurations, all valid, best guesses first: per register tile of `_PICKS` the valid
    configuration with the most threads and the blocks closest to the pick's; then the same on one thread."""
    space = lowrank_space(problem, target)
    width = lanes(problem.dtype, numba_family.widest_vector_bytes(target))
    valid = space.valid_configs()
    picks: list[Config] = []
    for mr, vectors, mb, kc in _PICKS:
        same_tile = [c for c in valid if c["mr"] == mr and c["nr"] == vectors * width]
        if not same_tile:
            continue
        best = min(same_tile, key=lambda c: (-int(c["threads"]), abs(int(c["mb"]) - mb), abs(int(c["kc"]) - kc)))
        if best not in picks:
            picks.append(best)
    single = [{**c, "threads": 1} for c in picks if int(c["threads"]) > 1]
    return picks + [c for c in single if space.why_invalid(c) is None and c not in picks]

