"""One op's kernels on one backend: what tune, bench and export build, compile, evaluate and compare against.

`OpBackend(op_name, backend)` joins the registry's op (its families, baselines, inputs and reference) with a device
runtime (backends/cuda.py or backends/cpu.py). It is picklable (two names), so tuning workers build their own. It
knows no op by name: everything op-specific comes from `ops.registry.get_op`.

- The space is every family's space that applies (a `UnionSpace` routed by the `family` parameter where a backend
  has several families), parts in the order of their names (the canonical order the source hash uses too).
- The source hash is one hasher for every op and backend: the SHA-256 of each applying family's `template`, in that
  order, hashed together (16 hex digits).
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from tracea_cli.backends.base import (
    Artifact,
    CompileFailed,
    Evaluation,
    Status,
    failure,
)
from tracea_cli.errors import ToolchainMissing, TraceaError, UsageError
from tracea_cli.ops.base import Baseline, Family, families_for, family_named
from tracea_cli.ops.registry import get_op
from tracea_cli.space import SearchSpace, UnionSpace, Value
from tracea_cli.target import ARCH_LIMITS, Target
from tracea_cli.timing import TimingPolicy

BACKENDS = ("cuda", "cpu")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class OpBackend:
    op_name: str
    name: str  # the backend: "cuda" | "cpu"

    def __post_init__(self) -> None:
        if self.name not in BACKENDS:
            raise UsageError(f"the {self.name} backend has no kernels yet.", f"Use --backend {' or '.join(BACKENDS)}.")

    @property
    def op(self) -> Any:
        return get_op(self.op_name)

    @property
    def families(self) -> tuple[Family, ...]:
        """This backend's families in canonical (name) order."""
        return tuple(sorted(families_for(self.op, self.name), key=lambda f: f.name))

    def _runtime(self) -> Any:
        if self.name == "cuda":
            from tracea_cli.backends import cuda

            return cuda
        from tracea_cli.backends import cpu

        return cpu

    # ---- the space --------------------------------------------------------------------------------------------

    def spaces(self, problem: Any, target: Target) -> tuple[tuple[Family, SearchSpace], ...]:
        """(family, space) of every family that applies, in canonical order."""
        out = []
        for family in self.families:
            space = family.space(problem, target)
            if not isinstance(space, str):
                out.append((family, space))
        return tuple(out)

    def space(self, problem: Any, target: Target) -> SearchSpace | UnionSpace:
        parts = self.spaces(problem, target)
        if not parts:
            reasons = "; ".join(str(f.space(problem, target)) for f in self.families) or "no kernel family"
            raise UsageError(f"{problem.label} has no kernels on the {self.name} backend here ({reasons}).",
                             "Try another dtype or backend.")
        if len(parts) == 1:
            return parts[0][1]
        return UnionSpace(tuple(space for _, space in parts))

    def why_invalid(self, problem: Any, target: Target, config: Mapping[str, Value]) -> str | None:
        """None if `config` is in its family's space for `problem` on `target`, else why not (the family's own reason
        where the family does not apply there)."""
        try:
            family = self.family_of(config)
        except KeyError:
            names = [f.name for f in families_for(self.op, self.name)]
            return f"family={config.get('family')!r} is not one of {names}"
        space = family.space(problem, target)
        return space if isinstance(space, str) else space.why_invalid(config)

    def config_in(self, problem: Any, config: Mapping[str, Value]) -> Mapping[str, Value]:
        """How `config`'s family names it in `problem`'s space (its optional `config_in` hook: the engine's staged
        configurations read as unstaged where a size needs no copy), else `config` itself."""
        try:
            named = getattr(self.family_of(config), "config_in", None)
        except KeyError:  # no such family: why_invalid says so
            return config
        return named(config, problem) if named is not None else config

    def family_of(self, config: Mapping[str, Value]) -> Family:
        own = families_for(self.op, self.name)
        return own[0] if len(own) == 1 else family_named(self.op, self.name, str(config.get("family")))

    def suggested(self, problem: Any, target: Target) -> list[dict[str, Value]]:
        """The families' hand-picked starting points, in the op's order of families (each configuration once)."""
        picks: list[dict[str, Value]] = []
        for family in families_for(self.op, self.name):
            if isinstance(family.space(problem, target), str):
                continue
            picks += [dict(c) for c in family.suggested(problem, target) if dict(c) not in picks]
        return picks

    def source_hash(self, problem: Any) -> str:
        """Hash of the kernel sources this problem compiles from on this backend (part of the cache key)."""
        texts = [t for t in (f.template(problem) for f in self.families) if t is not None]
        return digest("".join(digest(t) for t in texts))

    # ---- compile, evaluate ------------------------------------------------------------------------------------

    def compile(self, problem: Any, config: Mapping[str, Value], target: Target) -> Artifact:
        """Build one configuration (no device needed). Raises CompileFailed, with the space's reason for a
        configuration outside it."""
        reason = self.why_invalid(problem, target, config)
        if reason:
            raise CompileFailed(f"configuration rejected before compiling: {reason}")
        family = self.family_of(config)
        plan = family.launch(problem, config)
        source = family.source(problem, config)
        if self.name == "cpu":  # numba compiles where the kernel runs
            return Artifact(config=dict(config), family=family.name, source=source, plan=plan)
        arch = plan.arch or target.arch
        if arch is None:
            raise CompileFailed("a CUDA target needs an architecture (sm_80, sm_90, ...)")
        from tracea_cli.backends.cuda import compile_artifact

        return compile_artifact(family.name, source, plan, config, arch)

    def evaluate(self, artifact: Artifact, problem: Any, target: Target, *, policy: TimingPolicy | None,
                 seed: int) -> Evaluation:
        """Fresh inputs, poisoned outputs, one checked run against the float64 reference, then (with a policy)
        timing. Kernel faults become statuses."""
        family = family_named(self.op, self.name, artifact.family)
        return self._runtime().evaluate(self.op, family, problem, artifact, target, seed=seed, policy=policy)

    def launcher(self, artifact: Artifact, problem: Any, operands: Mapping[str, Any], *,
                 stream: int | None = None) -> Callable[[], None]:
        """A call of one compiled configuration on the caller's operands (tensor name -> array in storage format,
        outputs included; host arrays on the cpu backend, device arrays on cuda), queued on `stream` (a CUDA stream
        pointer; None: the current one). Nothing is checked here: the configuration was checked when it was tuned."""
        family = family_named(self.op, self.name, artifact.family)
        return self._runtime().launcher(family, problem, artifact, operands, stream=stream)

    def check(self, artifact: Artifact, problem: Any, target: Target, *, seed: int) -> Evaluation:
        """Correctness only: fresh inputs, poisoned outputs, the reference; no timing."""
        return self.evaluate(artifact, problem, target, policy=None, seed=seed)

    # ---- baselines --------------------------------------------------------------------------------------------

    def baseline_names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.op.baselines if self.name in b.backends)

    def baseline(self, problem: Any, target: Target, *, policy: TimingPolicy | None, seed: int,
                 name: str = "auto") -> tuple[str, Evaluation]:
        """Check and time baseline `name` ("auto": the op's default on this backend) on the inputs a kernel's
        evaluation makes from the same seed: (what ran, evaluation)."""
        own = [b for b in self.op.baselines if self.name in b.backends]
        chosen, missing = (auto_baseline(own) if name == "auto"
                           else (next((b for b in own if b.name == name), None), None))
        if chosen is None:
            return name, Evaluation(Status.LAUNCH_ERROR, f"{self.op_name} has no {name} baseline on {self.name}")
        try:
            label, ev = self._runtime().evaluate_baseline(self.op, chosen, problem, target, seed=seed, policy=policy)
            if missing is not None:  # the row says why the preferred library is not the one that ran
                label = f"{label} ({missing.requires} not installed)"
            return label, ev
        except ToolchainMissing as e:
            return chosen.name, failure(Status.LAUNCH_ERROR, e.message)
        except Exception as e:
            return chosen.name, failure(Status.LAUNCH_ERROR, e)


def auto_baseline(own: list[Baseline]) -> tuple[Baseline | None, Baseline | None]:
    """What `--baseline auto` runs among a backend's baselines: the first `default` one whose `requires` module is
    installed (else the first default, which then fails saying what is missing), and the preferred default it
    stands in for when that one's module is absent (else None)."""
    defaults = [b for b in own if b.default]
    if not defaults:
        return None, None
    installed = [b for b in defaults if b.requires is None or importlib.util.find_spec(b.requires) is not None]
    chosen = installed[0] if installed else defaults[0]
    return chosen, (defaults[0] if chosen is not defaults[0] else None)


# ---- configurations from elsewhere (cache imports) ---------------------------------------------------------------

_ARCH_IN_TEXT = re.compile(r"\bsm_?(\d{2,3}a?)\b", re.IGNORECASE)
_THREADS_IN_TEXT = re.compile(r"\|\s*(\d+) threads\b")


def target_of_key(key: Any) -> tuple[Target, bool]:
    """The target a stored key was tuned on, as far as its fields tell, and whether its limits are known: a CUDA key's
    architecture (`arch`, or an `sm_NN` in its device class) from the architecture table; a CPU key's thread count
    from its device class ("... | 8 threads | ..."). An unknown architecture gets the roomiest one's limits."""
    if key.backend == "cuda":
        names = ([key.arch] if key.arch else []) + [f"sm_{m.lower()}" for m in _ARCH_IN_TEXT.findall(key.device_class)]
        arch = next((a for a in names if a in ARCH_LIMITS), None)
        stand_in = arch or max(ARCH_LIMITS, key=lambda a: ARCH_LIMITS[a].max_shared_per_block_optin)
        return Target(backend="cuda", device_class=key.device_class, arch=stand_in, limits=ARCH_LIMITS[stand_in]), \
            arch is not None
    threads = _THREADS_IN_TEXT.search(key.device_class)
    return Target(backend=key.backend, device_class=key.device_class,
                  threads=int(threads.group(1)) if threads else None), threads is not None


def _without_rules(space: SearchSpace | UnionSpace) -> SearchSpace | UnionSpace:
    """The same space (each family's part) with no rules: parameter names and values are still checked, and a
    space's own handling of configurations (defaults of later-added parameters) is kept."""
    if isinstance(space, UnionSpace):
        return replace(space, parts=tuple(replace(part, rules=()) for part in space.parts))
    return replace(space, rules=())


def config_validator() -> Callable[[Any, Mapping[str, Value]], str | None]:
    """validate(key, config): None when `config` is in the search space of the key's problem (its op from the
    registry, its family by the configuration) on the key's target, else why not. Where the key does not tell the
    target's limits, only parameter names and values are checked."""
    checks: dict[str, Callable[[Mapping[str, Value]], str | None] | str] = {}

    def check_for(key: Any) -> Callable[[Mapping[str, Value]], str | None] | str:
        try:
            problem = get_op(key.op).from_key(key.dtype, key.problem_dict)
            if problem.sizes() != key.sizes_dict:
                return f"its sizes {key.sizes_dict} are not its problem's {problem.sizes()}"
            target, known = target_of_key(key)
            backend = OpBackend(key.op, key.backend)
            if known:
                return lambda config: backend.why_invalid(problem, target, config)
            return _without_rules(backend.space(problem, target)).why_invalid
        except TraceaError as e:
            return e.message.rstrip(".")
        except ModuleNotFoundError as e:
            return f"the {key.backend} {key.op} search space is not available in this installation ({e.name} is missing)"

    def validate(key: Any, config: Mapping[str, Value]) -> str | None:
        if key.digest not in checks:
            checks[key.digest] = check_for(key)
        found = checks[key.digest]
        return found if isinstance(found, str) else found(config)

    return validate
