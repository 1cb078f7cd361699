"""The numba GEMM kernels: correct over awkward shapes (both layouts, fp32 and fp64, every epilogue) and vectorised.

A kernel spec (dtype, register tile, parallel dimension) compiles once per process, in seconds, so the tests reuse
three specs and vary everything chosen at run time (layout, epilogue, blocks, packing, threads) from shape to shape.
"""

import dataclasses
import itertools
import platform
import re

import numpy as np
import pytest
from slow_tests import SLOW_TESTS

from tracea_cli.backends.checked import poison, upload
from tracea_cli.backends.cpu import call, compiled_entry
from tracea_cli.ops.gemm.families.numba import NUMBA, KernelSpec
from tracea_cli.ops.gemm.op import OP
from tracea_cli.ops.gemm.problem import EPILOGUE_NAMES as EPILOGUES
from tracea_cli.ops.gemm.problem import GemmProblem, make_inputs, reference
from tracea_cli.ops.verify import check

numba = pytest.importorskip("numba")

AWKWARD = (1, 17, 127, 1000, 1023)
# Every awkward size in every dimension, and every (M, N) pair: a Latin square over K.
SHAPES = [(AWKWARD[i], AWKWARD[j], AWKWARD[(i + j) % 5]) for i, j in itertools.product(range(5), repeat=2)]
THREADS = min(2, numba.config.NUMBA_NUM_THREADS)
# dtype -> the compiled part: register tile and parallel dimension (each dimension once; the third spec below).
KERNELS = {
    "fp32": {"mr": 6, "nr": 64, "parallel": "m"},
    "fp64": {"mr": 8, "nr": 16, "parallel": "n"},
}
# Run-time choices, cycled over the shapes. Blocks smaller than the larger shapes, so that ragged blocks, several
# K blocks (C accumulated in memory) and several blocks per thread all occur.
RUN_TIME = [
    {"mc": 96, "kc": 256, "nc": 512, "pack_a": True, "threads": THREADS},
    {"mc": 48, "kc": 128, "nc": 192, "pack_a": False, "threads": THREADS},
    {"mc": 192, "kc": 512, "nc": 4096, "pack_a": True, "threads": 1},
    {"mc": 24, "kc": 300, "nc": 960, "pack_a": False, "threads": 1},
]


def _config(dtype: str, i: int) -> dict:
    return {**KERNELS[dtype], **RUN_TIME[i % len(RUN_TIME)]}


def _entry(problem: GemmProblem, config: dict, **values):
    """The family's module for `config`, compiled in memory (its assembly can be read), and its call step with
    `values` put in place of the plan's."""
    (step,) = NUMBA.launch(problem, config).steps
    step = dataclasses.replace(step, values={**step.values, **values})
    return compiled_entry(NUMBA.source(problem, config), step), step


def run_gemm(problem: GemmProblem, config: dict, inputs: dict, **values) -> np.ndarray:
    """C for `inputs`, computed by the kernel the CPU runtime would run for `config`, into a NaN-poisoned C."""
    entry, step = _entry(problem, config, **values)
    operands = upload(np, OP.tensors(problem), inputs, problem.dtype)
    poison(operands["C"], problem.dtype)
    call(entry, step, NUMBA.args(problem, operands))
    return operands["C"]


def _check(problem: GemmProblem, config: dict, seed: int, **values):
    inputs = make_inputs(problem, np.random.default_rng(seed))
    out = run_gemm(problem, config, inputs, **values)
    return check(out.astype(np.float64), reference(problem, inputs)["C"], problem.dtype)


@pytest.mark.parametrize("dtype,layout", list(itertools.product(KERNELS, ("nn", "nt"))))
def test_awkward_shapes_are_correct(dtype, layout):
    """Every shape in nn; in nt (the same kernels, B read transposed) every other one unless TRACEA_SLOW_TESTS=1."""
    failures = []
    for i, (m, n, k) in enumerate(SHAPES):
        if layout == "nt" and i % 2 and not SLOW_TESTS:
            continue
        problem = GemmProblem(m, n, k, dtype=dtype, layout=layout)
        config = _config(dtype, i)
        verdict = _check(problem, config, seed=i)
        if not verdict.ok:
            failures.append(f"{problem.label} {config}: {verdict.reason}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype,layout", list(itertools.product(KERNELS, ("nn", "nt"))))
def test_every_epilogue_is_correct(dtype, layout):
    failures = []
    for j, epilogue in enumerate(EPILOGUES):
        for i, (m, n, k) in enumerate([(17, 1000, 127), (1023, 17, 300)]):
            problem = GemmProblem(m, n, k, dtype=dtype, layout=layout, epilogue=epilogue)
            config = _config(dtype, i + j)
            verdict = _check(problem, config, seed=100 + i + 2 * j)
            if not verdict.ok:
                failures.append(f"{problem.label} {config}: {verdict.reason}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_another_tile_and_parallel_dimension(layout):
    """fp32 with a 4x64 tile, threads sharing out N blocks, on the shapes with the most ragged edges."""
    config = {"mr": 4, "nr": 64, "parallel": "n", "mc": 64, "kc": 256, "nc": 192, "pack_a": False, "threads": THREADS}
    for i, shape in enumerate([(1023, 1000, 17), (17, 1023, 1000), (1, 127, 1023), (127, 1, 1)]):
        problem = GemmProblem(*shape, layout=layout, epilogue=EPILOGUES[i + 1])
        verdict = _check(problem, config, seed=200 + i)
        assert verdict.ok, f"{problem.label}: {verdict.reason}"


@pytest.mark.parametrize("dtype,group", list(itertools.product(KERNELS, (1, 3))))
def test_shared_operand_packed_in_groups_of_k_blocks(dtype, group):
    """A small packing bound: the shared operand is packed `group` K blocks at a time (8 K blocks: ragged groups)."""
    problem = GemmProblem(130, 200, 1000, dtype=dtype, epilogue="bias_residual")
    config = {**KERNELS[dtype], "mc": 48, "kc": 128, "nc": 192, "pack_a": True, "threads": THREADS}
    spec = KernelSpec.of(problem, config)
    # one K block of the shared operand: the B panel (parallel m) or the A block (parallel n), in whole strips
    rows = -(-192 // spec.nr) * spec.nr if spec.parallel == "m" else -(-48 // spec.mr) * spec.mr
    verdict = _check(problem, config, seed=11, budget=group * rows * 128)  # the bound, in elements
    assert verdict.ok, verdict.reason


def test_the_output_is_written_not_accumulated_into():
    """C starts as NaN; a kernel that read C before its first K block would return NaN."""
    problem = GemmProblem(33, 70, 600)  # three K blocks of 256
    assert _check(problem, _config("fp32", 0), seed=7).ok


def test_a_wrong_kernel_would_be_caught():
    """The check the tests rely on fails when the kernel's output is disturbed (a test that can fail)."""
    problem = GemmProblem(127, 17, 1000)
    inputs = make_inputs(problem, np.random.default_rng(3))
    out = run_gemm(problem, _config("fp32", 0), inputs)
    ref = reference(problem, inputs)["C"]
    assert check(out.astype(np.float64), ref, "fp32").ok
    out[-1, -1] += 1e-2 * np.abs(ref).max()
    assert not check(out.astype(np.float64), ref, "fp32").ok


PACKED_FMA = re.compile(r"\bvfmadd(132|213|231)p([sd])\s+[^\n]*%(xmm|ymm|zmm)\d+")


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the check reads x86 assembly")
@pytest.mark.parametrize("dtype", list(KERNELS))
def test_the_kernel_is_vectorised_with_packed_fma(dtype):
    problem = GemmProblem(64, 64, 64, dtype=dtype)
    spec = KernelSpec.of(problem, _config(dtype, 0))
    kernel, _ = _entry(problem, _config(dtype, 0))
    suffix = "s" if dtype == "fp32" else "d"
    accumulators = spec.mr * spec.nr // spec.lanes
    # one packed FMA per accumulator vector of the register tile, at least (LLVM may unroll the K loop further),
    # in the whole kernel as it runs (the micro-kernels inlined) and in each micro-kernel on its own (A in place,
    # A packed)
    for assembly in (kernel.assembly(), kernel.assembly("micro"), kernel.assembly("micro_packed")):
        kinds = [m.group(2) for m in PACKED_FMA.finditer(assembly)]
        assert kinds.count(suffix) >= accumulators, assembly[:2000]
    for name in ("micro", "micro_packed"):
        scalar = re.search(rf"\bvfmadd\d+s{suffix}\b", kernel.assembly(name))
        assert not scalar, f"a scalar FMA: {name} was not vectorised"
        # the next B strip is fetched into L2 (prefetcht1) inside the K loop, between the FMAs
        assert re.search(r"\bprefetcht1\b", kernel.assembly(name)), f"{name} does not prefetch the next B strip"
