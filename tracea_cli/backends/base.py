"""What a backend is given and returns. Data only; no device code here. (Where kernels run, the `Target`, is ground
floor: tracea_cli/target.py; what an op's kernels are, its families and launch plans, is in ops/.)"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Protocol

from tracea_cli.ops.launch import LaunchPlan
from tracea_cli.space import Value
from tracea_cli.target import Target
from tracea_cli.timing import Samples, TimingPolicy


class Status(str, Enum):
    OK = "ok"
    INVALID = "invalid"  # rejected by the space's rules, never compiled
    COMPILE_ERROR = "compile_error"
    LAUNCH_ERROR = "launch_error"  # illegal address, too many resources, ...
    WRONG_RESULT = "wrong_result"
    TIMEOUT = "timeout"
    CRASHED = "crashed"  # the worker process died


@dataclass(frozen=True)
class Artifact:
    """A compiled configuration, ready to load: its family's source and launch plan, and for CUDA the cubin (None
    on the CPU, where numba compiles in the evaluating process)."""

    config: Mapping[str, Value]
    family: str
    source: str  # the exact source that was compiled
    plan: LaunchPlan
    binary: bytes | None = None
    arch: str | None = None  # what the cubin was built for ("sm_90a")
    resources: Mapping[str, Any] = field(default_factory=dict)  # ptxas report: registers, smem, spills per kernel
    compile_s: float = 0.0


@dataclass(frozen=True)
class Evaluation:
    """The outcome of checking and timing one configuration (or a baseline)."""

    status: Status
    reason: str = ""
    samples: Samples | None = None
    rel_error: float | None = None
    compile_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


class Backend(Protocol):
    """One op's kernels on one backend (backends/op_backend.OpBackend): space, compile, evaluate, baselines.
    Memory belongs to arrays, not to the backend. Workers build one with a picklable factory."""

    name: str

    def space(self, problem: Any, target: Target) -> Any:
        """The problem's search space on this target (every family that applies), rules including the limits."""
        ...

    def source_hash(self, problem: Any) -> str:
        """Hash of the kernel sources this problem compiles from (part of the cache key)."""
        ...

    def compile(self, problem: Any, config: Mapping[str, Value], target: Target) -> Artifact:
        """Build one configuration; needs no device. Raises `CompileFailed`."""
        ...

    def evaluate(self, artifact: Artifact, problem: Any, target: Target, *, policy: TimingPolicy, seed: int) -> Evaluation:
        """Run on fresh random inputs, check against the reference, and only then time. Never raises for kernel faults."""
        ...

    def baseline(self, problem: Any, target: Target, *, policy: TimingPolicy, seed: int,
                 name: str = "auto") -> tuple[str, Evaluation]:
        """Check and time a library baseline on the same problem: (what ran, evaluation)."""
        ...


class CompileFailed(Exception):
    """A configuration did not compile; the message is the compiler's log (trimmed), or why it was not compiled."""


def failure(status: Status, error: BaseException | str, compile_s: float = 0.0, limit: int = 600) -> Evaluation:
    """A failed evaluation whose reason is the error's type and message on one line, trimmed to `limit`."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    text = " ".join(text.split())
    return Evaluation(status, reason=text if len(text) <= limit else text[: limit - 3] + "...", compile_s=compile_s)


@dataclass(frozen=True)
class DevicePointer:
    """A raw device address (a torch tensor's `data_ptr()`) passed where a runtime takes a device array. A bare int
    would be read as a size; this reads as an array does (`.data.ptr`, as CuPy's)."""

    ptr: int

    @property
    def data(self) -> "DevicePointer":
        return self
