"""The CPU GEMM search space (the numba family, ops/gemm/families/numba.py): parameters and the rules between them.

A configuration names the register tile (`mr` rows × `nr` columns of C held in vector registers), the cache blocks
(`mc` rows of A, `kc` steps of K, `nc` columns of B packed at a time), whether A is packed into MR-tall strips or
read in place (`pack_a`; B is always packed), the dimension whose blocks the threads share out (`parallel`: "m" keeps
one packed B panel for all threads, "n" one packed A block) and the number of threads.

Rules come from the register file (accumulators plus one row of B must fit, or the micro-kernel spills), from
the parameters themselves (a block holds whole register tiles), and from the shape (a tile or block larger than its
dimension needs only repeats a smaller one; every thread gets at least one block; one thread has no parallel
dimension to choose; sharing out N blocks is for short M, where M has too few blocks to share). Pure: no I/O, no
randomness; the target contributes its thread count and its vector (`vector`: the widest it has, so that the register
rule counts the registers it really has).

Only `mr`, `nr` and `parallel` (with the dtype) select a compiled kernel; the rest, and the problem's layout and
epilogue, are run-time arguments, so a search compiles at most a dozen kernels per dtype.
"""

from __future__ import annotations

from typing import Mapping

from tracea_cli.ops import numba_family
from tracea_cli.ops.gemm.problem import GemmProblem
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
MR = (4, 6, 8)
NR_VECTORS = (2, 4)
MC = (64, 96, 192)
KC = (256, 512)
NC = (512, 4096)

STORED_VECTOR = WIDE_VECTOR_BYTES  # what a configuration stored before `vector` existed ran with


def _params(problem: GemmProblem, threads: int, vector: int) -> tuple[Param, ...]:
    width = lanes(problem.dtype, vector)
    return (
        Param("mr", MR, doc="rows of the register tile"),
        Param("nr", tuple(v * width for v in NR_VECTORS), doc=f"columns of the register tile ({width} per vector)"),
        numba_family.vector_param(vector),
        Param("mc", MC, doc="rows of A per cache block"),
        Param("kc", KC, doc="depth (K) of a cache block"),
        Param("nc", NC, doc="columns of B per cache block"),
        Param("pack_a", (True, False), "categorical", "pack A into MR-tall strips, or read it in place"),
        Param("parallel", ("m", "n"), "categorical", "threads share out M blocks (B panel shared) or N blocks"),
        Param("threads", thread_counts(threads), doc="threads of numba's pool"),
    )



def _rules(problem: GemmProblem, vector: int) -> tuple[Rule, ...]:
    m, n, k = problem.m, problem.n, problem.k
    nr_values = tuple(v * lanes(problem.dtype, vector) for v in NR_VECTORS)

    def register_file(c) -> str | None:
        needed = registers_for(int(c["mr"]), int(c["nr"]), problem.dtype, vector)
        if needed > VECTOR_REGISTERS[vector]:
            return (f"a {c['mr']}x{c['nr']} register tile needs {needed} vector registers of {vector} bytes "
                    f"(accumulators, a row of B, a broadcast of A); more than {VECTOR_REGISTERS[vector]} spill")
        return None

    def whole_tiles(c) -> str | None:
        if c["mc"] % c["mr"]:
            return f"mc={c['mc']} is not a multiple of mr={c['mr']}: every block would end in a ragged strip"
        if c["nc"] % c["nr"]:
            return f"nc={c['nc']} is not a multiple of nr={c['nr']}: every block would end in a ragged strip"
        return None

    def tile_fits_problem(c) -> str | None:
        for name, size, dim, values in (("mr", m, "M", MR), ("nr", n, "N", nr_values)):
            cover = _covering(values, size, 1)
            if c[name] > cover:
                return f"{name}={c[name]} is larger than {dim}={size} needs; {name}={cover} already covers it"
        return None

    def blocks_fit_problem(c) -> str | None:
        for name, size, dim, values, step in (("mc", m, "M", MC, int(c["mr"])), ("kc", k, "K", KC, 1),
                                              ("nc", n, "N", NC, int(c["nr"]))):
            cover = _covering(tuple(v for v in values if v % step == 0) or values, size, step)
            if c[name] > cover:
                return f"{name}={c[name]} is larger than {dim}={size} needs; {name}={cover} already covers it"
        return None

    def every_thread_has_work(c) -> str | None:
        threads = int(c["threads"])
        if threads == 1:
            if c["parallel"] == "n":
                return "with threads=1 the parallel dimension makes no difference: parallel=m covers it"
            return None
        if c["parallel"] == "m":
            blocks, dim, size, name = -(-m // c["mc"]), "M", m, "mc"
        else:
            blocks, dim, size, name = -(-n // c["nc"]), "N", n, "nc"
        if blocks < threads:
            return (f"parallel={c['parallel']} splits {dim}={size} into {blocks} block(s) of {name}={c[name]}: "
                    f"fewer than threads={threads}, so a thread would idle")
        return None

    def parallel_n_for_short_m(c) -> str | None:
        blocks = -(-m // c["mc"])
        if c["parallel"] == "n" and blocks > 2 * int(c["threads"]):
            return (f"parallel=n packs B again for each of M's {blocks} blocks of mc={c['mc']}; with more than "
                    f"{2 * int(c['threads'])} M blocks, parallel=m shares them out and packs B once")
        return None

    return (register_file, whole_tiles, tile_fits_problem, blocks_fit_problem, every_thread_has_work,
            parallel_n_for_short_m)


# Register tile and cache blocks of the hand-picked configurations, best guesses first for large squares.
_PICKS = ((6, 4, 96, 256), (8, 2, 64, 256), (6, 2, 96, 512), (4, 4, 64, 512), (6, 2, 192, 256), (4, 2, 64, 256))


def gemm_space(problem: GemmProblem, target: Target) -> SearchSpace:
    """The CPU GEMM configurations for `problem` (fp32 or fp64) on a target with `target.threads` threads."""
    if problem.dtype not in DTYPES:
        raise ValueError(f"the CPU kernels do {' and '.join(DTYPES)}, not {problem.dtype}")
    vector = numba_family.widest_vector_bytes(target)
    return SearchSpace(params=_params(problem, target.threads or 1, vector), rules=_rules(problem, vector))


def hand_picked(problem: GemmProblem, target: Target) -> list[Config]:
    """A few sensible configurations for `problem`, all valid in its space, best guesses first (for benchmarks and a
    tuner's first proposals). For each register tile of `_PICKS` it takes the valid configuration that uses the most
    threads, prefers parallel=m and packed A, and has the cache blocks closest to the pick's."""
    space = gemm_space(problem, target)
    width = lanes(problem.dtype, numba_family.widest_vector_bytes(target))
    valid = space.valid_configs()
    picks: list[Config] = []
    for mr, vectors, mc, kc in _PICKS:
        same_tile = [c for c in valid if c["mr"] == mr and c["nr"] == vectors * width]
        if not same_tile:
            continue
        best = min(same_tile, key=lambda c: (-int(c["threads"]), c["parallel"] != "m", not c["pack_a"],
                                              abs(int(c["mc"]) - mc), abs(int(c["kc"]) - kc), -int(c["nc"])))
        if best not in picks:
            picks.append(best)
    return picks


def describe(config: Mapping[str, Value]) -> str:
    """A short human label: "6x64 mc96 kc256 nc4096 packA par-m t2" (" ymm" at the end with 32-byte vectors)."""
    pack = "packA" if config["pack_a"] else "inplaceA"
    return (f"{config['mr']}x{config['nr']} mc{config['mc']} kc{config['kc']} nc{config['nc']} {pack} "
            f"par-{config['parallel']} t{config['threads']}"
            + (" ymm" if vector_of(config, STORED_VECTOR) == VECTOR_BYTES else ""))
