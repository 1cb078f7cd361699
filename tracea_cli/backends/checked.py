"""The one check-then-time path, for kernels and baselines, on a GPU and on the host.

Fresh inputs for the seed and their float64 reference (the op's), operands in storage format (the runtime's
`upload`), the outputs poisoned with NaN, one run, every output checked against the reference (ops/verify.py: NaN
never passes), and only a correct run timed with the shared harness. A fault while loading, launching or timing is a
LAUNCH_ERROR evaluation, never an exception. What differs between a GPU and the host (where arrays live, how to wait
for the work, the clock, the L2 flush between samples) comes in a `Device`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from tracea_cli.backends.base import Evaluation, Status, failure
from tracea_cli.ops.base import Tensor
from tracea_cli.ops.dtypes import from_storage, to_storage
from tracea_cli.ops.verify import check
from tracea_cli.timing import Clock, TimingPolicy, measure

# operands -> a run that writes the outputs: a callable, or a prepared library call (ops/base.BaselineRun: its `run`,
# the `math` context it needs, the `stream` it is queued on)
Launcher = Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True)
class Device:
    """Where a check runs: its array module (numpy or CuPy), its input generator for a seed, how to wait for queued
    work, the clock for a stream (None: the current one), and what runs before each sample (an L2 flush)."""

    xp: Any
    rng: Callable[[int], Any]
    synchronize: Callable[[], None]
    clock: Callable[[int | None], Clock]
    prepare: Callable[[], None] | None = None


def storage_dtype(dtype: str) -> np.dtype:
    """The numpy dtype arrays of `dtype` are stored in (bf16: uint16 bit patterns)."""
    return to_storage(np.zeros(1), dtype).dtype


def upload(xp: Any, tensors: tuple[Tensor, ...], inputs: Mapping[str, Any], dtype: str) -> dict[str, Any]:
    """Operands by tensor name in storage format on `xp`'s device (host inputs are copied to a GPU), the outputs
    allocated (not yet poisoned)."""
    out: dict[str, Any] = {}
    for t in tensors:
        dt = t.dtype or dtype
        if t.output:
            out[t.name] = xp.empty(t.shape, dtype=storage_dtype(dt))
        else:
            out[t.name] = xp.asarray(to_storage(inputs[t.name], dt))
    return out


def poison(array: Any, dtype: str) -> None:
    """Fill an output with NaN (bf16: its NaN bit pattern), so that any element a kernel fails to write fails."""
    array.fill(0x7FC0 if dtype == "bf16" else np.nan)


def check_outputs(outputs: Mapping[str, Any], reference: Mapping[str, Any], dtype: str,
                  dtypes: Mapping[str, str]) -> tuple[bool, float | None, str]:
    """(all correct, the largest relative error, the first failure's reason) over every output."""
    worst = 0.0
    for name, ref in reference.items():
        verdict = check(from_storage(outputs[name], dtypes.get(name, dtype)), ref, dtypes.get(name, dtype))
        if not verdict.ok:
            reason = verdict.reason if len(reference) == 1 else f"{name}: {verdict.reason}"
            return False, verdict.rel_error, reason
        worst = max(worst, verdict.rel_error)
    return True, worst, ""


def run_checked(op: Any, problem: Any, device: Device, launcher: Launcher, *, seed: int, policy: TimingPolicy | None,
                compile_s: float = 0.0) -> Evaluation:
    """Check (and with a policy, time) what `launcher(operands)` runs on fresh inputs for `seed`."""
    tensors = op.tensors(problem)
    dtypes = {t.name: t.dtype for t in tensors if t.dtype}
    outputs = [t for t in tensors if t.output]
    try:
        inputs = op.make_inputs(problem, device.rng(seed))
        reference = op.reference(problem, inputs)
        operands = upload(device.xp, tensors, inputs, problem.dtype)
        prepared = launcher(operands)
    except Exception as e:  # a module that will not load, a library that refuses the problem
        return failure(Status.LAUNCH_ERROR, e, compile_s)
    run = prepared if callable(prepared) else prepared.run
    math = None if callable(prepared) else prepared.math
    stream = None if callable(prepared) else prepared.stream
    with (math() if math is not None else contextlib.nullcontext()):
        try:
            for t in outputs:
                poison(operands[t.name], t.dtype or problem.dtype)
            run()
            device.synchronize()
        except Exception as e:  # an illegal address, too many resources, ...: the kernel's fault, not ours
            return failure(Status.LAUNCH_ERROR, e, compile_s)
        ok, rel_error, reason = check_outputs({t.name: operands[t.name] for t in outputs}, reference, problem.dtype,
                                              dtypes)
        if not ok:
            return Evaluation(Status.WRONG_RESULT, reason=reason, rel_error=rel_error, compile_s=compile_s)
        if policy is None:
            return Evaluation(Status.OK, rel_error=rel_error, compile_s=compile_s)
        try:
            samples = measure(run, clock=device.clock(stream), policy=policy, prepare=device.prepare)
        except Exception as e:
            return failure(Status.LAUNCH_ERROR, f"while timing: {type(e).__name__}: {e}", compile_s)
    return Evaluation(Status.OK, samples=samples, rel_error=rel_error, compile_s=compile_s)
