"""What a backend is, what it is given and what it returns. Data only; no device code here. (Where kernels run, the
`Target`, is ground floor: tracea_cli/target.py.)"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Protocol

from tracea_cli.space import SearchSpace, Value
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
    """A compiled configuration, ready to load. `binary` is a cubin for CUDA, None for the CPU (numba compiles in the worker)."""

    config: Mapping[str, Value]
    kernel_name: str
    binary: bytes | None = None
    source: str = ""  # the exact source that was compiled
    launch: Mapping[str, Any] = field(default_factory=dict)  # grid/block/shared memory rules, kernel-specific
    resources: Mapping[str, Any] = field(default_factory=dict)  # registers, smem, spills, stack (ptxas report)
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
    """Compiles, loads, runs and times one op's kernels. Memory belongs to arrays, not to the backend."""

    name: str

    def space(self, problem: Any, target: Target) -> SearchSpace:
        """The problem's search space on this target, its rules including the target's limits."""
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

    def baseline(self, problem: Any, target: Target, *, policy: TimingPolicy, seed: int) -> tuple[str, Evaluation]:
        """Time the vendor library on the same problem: (name, evaluation)."""
        ...


class CompileFailed(Exception):
    """A configuration did not compile; the message is the compiler's log (trimmed)."""
