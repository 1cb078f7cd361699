"""The kernel families an export can hold, behind one builder: the CUDA engine's (SIMT, mma.sync) and the Hopper
wgmma/TMA family (sm_90a).

The engine's space knows its own families only; the Hopper family has its own space and backend
(ops/gemm/hopper_space.py, backends/cuda_hopper.py). `ExportBuilder.space` answers for both, routing a configuration
by its `family`, and says in one sentence why a wgmma configuration does not fit elsewhere; `compile` sends each
configuration to its family's backend. `ServedBy` narrows a problem's space to what a variant built for another size
computes: a wgmma kernel built without a staging pre-pass cannot take sizes that need one. `place_wgmma` moves the wgmma variants to sm_90a, the only architecture
whose instruction set has wgmma.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from tracea_cli.backends.base import Artifact
from tracea_cli.errors import UsageError
from tracea_cli.space import Value
from tracea_cli.target import Target, base_arch

WGMMA = "wgmma"  # ops/gemm/hopper_space.FAMILY
WGMMA_ARCH = "sm_90a"  # backends/cuda_hopper.ARCH: wgmma and setmaxnreg exist on the arch-specific target only
WGMMA_BASE = "sm_90"
NEEDS_SM90A = "wgmma needs --arch sm_90a"


def is_wgmma(config: Mapping[str, Value]) -> bool:
    return config.get("family") == WGMMA


@dataclass(frozen=True)
class FamilySpace:
    """The search space of one problem on one architecture across the families an export builds: the engine's
    space for its families, the Hopper space for wgmma (None where that family does not apply, `hopper_absent`
    saying why)."""

    arch: str
    engine: Any  # SearchSpace (or UnionSpace) of the CUDA engine
    hopper: Any = None
    hopper_absent: str = ""

    def why_invalid(self, config: Mapping[str, Value]) -> str | None:
        if not is_wgmma(config):
            return self.engine.why_invalid(config)
        if base_arch(self.arch) != WGMMA_BASE:
            return f"the wgmma family runs on sm_90a only, not on {self.arch} ({NEEDS_SM90A})"
        if self.hopper is None:
            return self.hopper_absent
        return self.hopper.why_invalid(config)


@dataclass(frozen=True)
class ServedBy:
    """The space of `problem` as a variant built for `tuned` sees it (export.dispatch asks it about other sizes). A
    wgmma variant's staging pre-pass follows from its tuned problem (hopper_space.staging); it computes another size
    only where that staging covers what the size needs (staging an aligned operand is correct, only slower)."""

    space: Any  # FamilySpace of `problem`
    tuned: Any  # GemmProblem the variant was built for
    problem: Any

    def why_invalid(self, config: Mapping[str, Value]) -> str | None:
        from tracea_cli.ops.gemm import hopper_space as hs

        if is_wgmma(config) and not hs.staging(self.tuned).covers(hs.staging(self.problem)):
            return (f"the kernel built for {self.tuned.label} has no staging pre-pass for what {self.problem.label} "
                    f"needs ({hs.staging(self.problem)})")
        return self.space.why_invalid(config)


class ExportBuilder:
    """writer.Builder over the CUDA engine and the Hopper backend."""

    def __init__(self, engine: Any = None, hopper: Any = None) -> None:
        if engine is None:
            from tracea_cli.backends.cuda import CudaBackend

            engine = CudaBackend()
        if hopper is None:
            from tracea_cli.backends.cuda_hopper import HopperBackend

            hopper = HopperBackend()
        self.engine, self.hopper = engine, hopper

    def space(self, problem: Any, target: Target) -> FamilySpace:
        from tracea_cli.ops.gemm import hopper_space as hs

        hopper = hs.hopper_space(problem, target)
        absent = "" if hopper is not None else (hs.qualifies(problem, target) or "the wgmma family does not apply")
        return FamilySpace(arch=target.arch or "", engine=self.engine.space(problem, target), hopper=hopper,
                           hopper_absent=absent)

    def compile(self, problem: Any, config: Mapping[str, Value], target: Target) -> Artifact:
        if is_wgmma(config):
            if target.arch != WGMMA_ARCH:
                raise ValueError(f"wgmma configurations are built for {WGMMA_ARCH}, not {target.arch}")
            return self.hopper.compile(problem, config, target)
        return self.engine.compile(problem, config, target)


def check_file_config(config: Mapping[str, Value], archs: Sequence[str], path: Any) -> None:
    """A wgmma configuration from a file is one configuration for every architecture: each must be sm_90."""
    if not is_wgmma(config):
        return
    others = [a for a in archs if base_arch(a) != WGMMA_BASE]
    if others:
        raise UsageError(f"the wgmma configuration in {path} runs on sm_90a only, so it cannot be exported for "
                         f"{', '.join(others)} ({NEEDS_SM90A}).",
                         "Export it with --arch sm_90a alone, and the other architectures in another export with a "
                         "configuration of their own (from the tuning cache, which chooses per architecture, or "
                         "--config default).")


def place_wgmma(choices: Sequence[Any], warnings: list[str]) -> list[Any]:
    """The choices with every sm_90 architecture that holds a wgmma configuration built as sm_90a.

    The runtime takes one architecture's cubins per device, so a plain sm_90 request moves to sm_90a whole (its
    other shapes' configurations build for sm_90a as well); where sm_90a was requested too, it already serves
    compute capability 9.0 and the sm_90 choices (the same ones, from the same space) are dropped.
    """
    archs = list(dict.fromkeys(c.arch for c in choices))
    out: list[Any] = []
    for arch in archs:
        group = [c for c in choices if c.arch == arch]
        wgmma = [c for c in group if is_wgmma(c.config)]
        if not wgmma or arch == WGMMA_ARCH:
            out += group
            continue
        if base_arch(arch) != WGMMA_BASE:  # the spaces refuse this earlier; kept as the rule's last word
            raise UsageError(f"{wgmma[0].problem.label} got a wgmma configuration for {arch} ({NEEDS_SM90A}).",
                             "Export wgmma configurations for sm_90a only.")
        if WGMMA_ARCH in archs:
            theirs = {_shape_key(c): c.config for c in choices if c.arch == WGMMA_ARCH}
            differ = [c.problem.label for c in group if theirs.get(_shape_key(c)) != c.config]
            if differ:
                raise UsageError(f"{arch} and {WGMMA_ARCH} would get different configurations for {differ[0]}, and "
                                 f"one GPU runs only one of them.", f"Pass only one of --arch {arch} and {WGMMA_ARCH}.")
            warnings.append(f"{arch}: its configurations use wgmma, which exists on {WGMMA_ARCH} only; the "
                            f"{WGMMA_ARCH} cubins serve compute capability 9.0, so no {arch} cubins are built.")
            continue
        warnings.append(f"{wgmma[0].problem.label}: the wgmma family needs {WGMMA_ARCH}; the {arch} cubins are built "
                        f"for {WGMMA_ARCH}, which runs on compute capability 9.0 only (H100, H200), not on later GPUs.")
        out += [replace(c, arch=WGMMA_ARCH) for c in group]
    return out


def _shape_key(choice: Any) -> tuple[int, int, int]:
    p = choice.problem
    return (p.m, p.n, p.k)
