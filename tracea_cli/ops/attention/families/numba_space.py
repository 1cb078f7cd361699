"""The CPU attention search space (the numba online-softmax family, families/numba.py): parameters and the rules
between them.

A configuration names the block of query rows one work item takes (`bm`: its scaled rows of Q, the running output
rows and the softmax statistics stay in that thread's buffers while every key block streams past), the block of keys
per step (`bn`: its rows of K and V are copied into contiguous tiles that all bm rows reuse, and its bm × bn scores
live in one buffer), and the threads.

Rules come from the shape (a block larger than its dimension needs only repeats a smaller one; every thread gets at
least one work item) and from the cache (a work item's tiles should stay in a core's L2). Pure: no I/O, no
randomness; the target contributes only its thread count. Nothing here selects a compiled kernel: bm, bn, the
layout, the mask and the lse flag are all run-time arguments, so one compilation per dtype serves every
configuration.
"""

from __future__ import annotations

from tracea_cli.ops.attention.problem import AttentionProblem
from tracea_cli.ops.numba_family import covering, thread_counts
from tracea_cli.space import Config, Param, Rule, SearchSpace
from tracea_cli.target import Target

DTYPES = ("fp32", "fp64")
BM = (4, 8, 16, 32, 64)
BN = (16, 32, 64, 128, 256)
# A work item's tiles (Q rows, output rows, K and V tiles, scores) should stay in L2: 512 KiB is a core's share on
# most x86 server parts of the last years (1-2 MiB per core), so the budget errs small.
CACHE_BYTES = 512 << 10


def tile_bytes(problem: AttentionProblem, bm: int, bn: int) -> int:
    """Bytes of one work item's buffers: Q rows and output rows (bm × D each), the K and V tiles (bn × D each), the
    scores (bm × bn), in the dtype."""
    d = problem.head_dim
    return (2 * bm * d + 2 * bn * d + bm * bn) * (4 if problem.dtype == "fp32" else 8)


def work_items(problem: AttentionProblem, bm: int) -> int:
    """Independent (batch, query head, block of bm query rows) items: what threads share."""
    return problem.batch * problem.heads * -(-problem.seq // bm)


def _params(threads: int) -> tuple[Param, ...]:
    return (
        Param("bm", BM, doc="query rows per work item (their output rows and softmax statistics kept per thread)"),
        Param("bn", BN, doc="keys per step (K and V tiles copied contiguous, reused by all bm rows)"),
        Param("threads", thread_counts(threads), doc="threads of numba's pool"),
    )


def _rules(problem: AttentionProblem) -> tuple[Rule, ...]:
    def blocks_fit_problem(c) -> str | None:
        for name, size, what, values in (("bm", problem.seq, "seq", BM), ("bn", problem.seq_k, "seq_k", BN)):
            cover = covering(values, size)
            if c[name] > cover:
                return f"{name}={c[name]} is larger than {what}={size} needs; {name}={cover} already covers it"
        return None

    def tiles_fit_cache(c) -> str | None:
        need = tile_bytes(problem, int(c["bm"]), int(c["bn"]))
        if need > CACHE_BYTES:
            return (f"bm={c['bm']}, bn={c['bn']} at head_dim {problem.head_dim} make {need >> 10} KiB of tiles per "
                    f"work item, more than the {CACHE_BYTES >> 10} KiB of L2 they should stay in")
        return None

    def every_thread_has_work(c) -> str | None:
        threads, items = int(c["threads"]), work_items(problem, int(c["bm"]))
        if threads > 1 and items < threads:
            return (f"bm={c['bm']} makes {items} work item(s) of batch x heads x query blocks: fewer than "
                    f"threads={threads}, so a thread would idle")
        return None

    return blocks_fit_problem, tiles_fit_cache, every_thread_has_work


def attention_space(problem: AttentionProblem, target: Target) -> SearchSpace:
    """The CPU configurations for `problem` (fp32 or fp64) on a target with `target.threads` threads."""
    if problem.dtype not in DTYPES:
        raise ValueError(f"the CPU kernels do {' and '.join(DTYPES)}, not {problem.dtype}")
    return SearchSpace(params=_params(target.threads or 1), rules=_rules(problem))


# (bm, bn) of the hand-picked configurations, best guesses first.
_PICKS = ((16, 64), (32, 64), (8, 128), (16, 32), (4, 64), (4, 16))


def hand_picked(problem: AttentionProblem, target: Target) -> list[Config]:
    """A few sensible configurations, all valid, best guesses first: per pick the valid configuration with the most
    threads and the blocks closest to the pick's; then the same on one thread."""
    space = attention_space(problem, target)
    valid = space.valid_configs()
    picks: list[Config] = []
    for bm, bn in _PICKS:
        if not valid:
            break
        best = min(valid, key=lambda c: (abs(int(c["bm"]) - bm) + abs(int(c["bn"]) - bn) / 4, -int(c["threads"])))
        if best not in picks:
            picks.append(best)
    single = [{**c, "threads": 1} for c in picks if int(c["threads"]) > 1]
    return picks + [c for c in single if space.why_invalid(c) is None and c not in picks]
