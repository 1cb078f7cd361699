"""Turning a tune request into a plan: op, backend, target, space, cache key, workers. Also the small conversions between
evaluations (what workers return) and trials (what the cache stores)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from tracea_cli.backends.base import CompileFailed, Evaluation, Status
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.errors import UsageError
from tracea_cli.ops.registry import get_op
from tracea_cli.space import Candidates, Value
from tracea_cli.target import Target
from tracea_cli.timing import Samples, TimingPolicy
from tracea_cli.tune.workers import EvalJob

BACKENDS = ("auto", "cuda", "cpu", "rocm")
BASELINE_SEED = 7  # fixed and non-negative: numpy generators refuse negative seeds


@dataclass(frozen=True)
class Plan:
    problem: Any  # the op's problem (ops/base.Problem)
    target: Target
    devices: tuple[int | None, ...]
    backend: OpBackend
    key: Any  # cache.CacheKey
    peak_flops: float | None = None  # the measured GEMM FLOP/s of this dtype on this device (tracea doctor), if any
    peak_source: str = ""  # where peak_flops comes from (doctor/ceilings.py: the measurement, or why there is none)

    @property
    def backend_factory(self) -> Any:
        """Picklable: builds the backend inside a worker."""
        return functools.partial(OpBackend, self.backend.op_name, self.backend.name)

    def candidates(self) -> Candidates:
        """The valid configurations (enumerated on demand: large spaces take seconds, a cache hit needs none)."""
        return Candidates.from_space(self.backend.space(self.problem, self.target))

    def suggested(self) -> list[Mapping[str, Value]]:
        """The families' hand-picked starting points for this problem."""
        return self.backend.suggested(self.problem, self.target)


def _cuda_usable() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def resolve_backend(name: str, problem: Any = None) -> str:
    """The backend `name` (auto: CUDA where a device is usable, else the CPU) checked against what the problem's op
    runs there; `problem` None checks only the name and the machine."""
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}.", f"Use one of {', '.join(BACKENDS)}.")
    if name == "rocm":
        raise UsageError("the rocm backend has no kernels yet (no AMD hardware has verified them).", "Use --backend cuda or cpu.")
    dtypes = get_op(problem.op).dtypes if problem is not None else {}
    # auto: CUDA where a device is usable, unless the op has no CUDA kernels for the problem's dtype and the CPU has
    cpu_only = problem is not None and problem.dtype not in dtypes.get("cuda", ()) and problem.dtype in dtypes.get("cpu", ())
    chosen = ("cuda" if not cpu_only and _cuda_usable() else "cpu") if name == "auto" else name
    if problem is not None:
        if problem.dtype not in dtypes.get(chosen, ()):
            others = [b for b, d in dtypes.items() if problem.dtype in d and b != chosen]
            why = " (no CUDA device is usable here)" if name == "auto" and "cuda" in others else ""
            raise UsageError(f"the {chosen} backend runs {problem.op} in {', '.join(dtypes.get(chosen, ())) or 'no dtype'}, "
                             f"not {problem.dtype}{why}.",
                             f"Use the {' or '.join(others)} backend for {problem.dtype}." if others else
                             f"Use dtype {' or '.join(dtypes.get(chosen, ()))} on the {chosen} backend." if dtypes.get(chosen)
                             else None)
    name = chosen
    if name == "cuda" and not _cuda_usable():
        raise UsageError("--backend cuda was asked for, but no CUDA device is usable here.", "Run `tracea doctor` to see why.")
    return name


def plan(request, settings) -> Plan:
    from tracea_cli.devices import parse_devices
    from tracea_cli.doctor.ceilings import ceiling_from_profile
    from tracea_cli.doctor.profile import cpu_target, cuda_target
    from tracea_cli.doctor.run import load_or_make_profile

    problem = request.problem
    backend_name = resolve_backend(request.backend, problem)
    profile = load_or_make_profile(settings)
    if backend_name == "cuda":
        devices: tuple[int | None, ...] = parse_devices(request.devices, len(profile.cuda_gpus))
        check_one_device_class(profile, devices)
        target = cuda_target(profile, devices[0])
    else:
        if request.devices not in (None, "cpu"):
            raise UsageError("--device chooses CUDA devices; the cpu backend uses this machine's CPU.", "Leave --device out.")
        devices = (None,)
        target = cpu_target(profile)
    backend = OpBackend(problem.op, backend_name)
    peak = ceiling_from_profile(profile, backend=backend_name, dtype=problem.dtype, device_index=target.device_index)
    return Plan(problem, target, devices, backend, cache_key(problem, backend, target), peak.flops_per_s,
                peak.flops_source)


def cache_key(problem: Any, backend: OpBackend, target: Target):
    """The cache key of `problem` tuned with `backend` on `target`: the op's problem key and sizes, the device class
    and architecture, the hash of the kernel sources it compiles from and the toolchain's versions."""
    from tracea_cli.cache import CacheKey

    return CacheKey(op=problem.op, backend=backend.name, dtype=problem.dtype, problem=problem.key(),
                    sizes=problem.sizes(), device_class=target.device_class, arch=target.arch,
                    source_hash=backend.source_hash(problem), toolchain=toolchain(backend.name))


def check_one_device_class(profile, devices) -> None:
    """Several GPUs tune one problem together only when they are the same kind: a tuning result (its cache key,
    its times) belongs to one device class."""
    from tracea_cli.doctor.profile import cuda_gpu

    classes = {i: cuda_gpu(profile, i).device_class for i in devices}
    if len(set(classes.values())) > 1:
        kinds = "; ".join(f"{i}: {c}" for i, c in classes.items())
        raise UsageError(f"--device names GPUs of different kinds ({kinds}), and a tuning result belongs to one kind.",
                         "Tune each kind on its own, e.g. --device 0 and then --device 1.")


def toolchain(backend: str) -> dict[str, str]:
    from importlib import metadata

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "absent"

    if backend == "cpu":
        return {"numba": version("numba"), "llvmlite": version("llvmlite"), "numpy": version("numpy")}
    from tracea_cli.backends import nvrtc

    return {"nvrtc": nvrtc.version(), "cupy": version("cupy-cuda13x")}


def first_configs(cache, key, plan: Plan, candidates: Candidates) -> list[Mapping[str, Value]]:
    """What to evaluate before the strategy proposes anything: the winners of the nearest cached problems (same op,
    backend, dtype, device class and non-size fields), then the shipped default for this problem on this
    architecture (what `tracea export --config default` would take), then the families' hand-picked configurations;
    only those valid here, each completed with the defaults of parameters it lacks (one stored, shipped or picked
    before a parameter existed means that parameter's default)."""
    from tracea_cli.space import config_key

    valid = candidates.index_of()
    space = plan.backend.space(plan.problem, plan.target)

    def completed(config: Mapping[str, Value]) -> dict[str, Value]:
        return dict(space.complete(config))

    out: list[Mapping[str, Value]] = []
    nearest = [c for _sizes, c in cache.nearest_winners(key, limit=3)]
    shipped = shipped_default(plan, lambda c: None if config_key(completed(c)) in valid else "outside the space")
    for config in map(completed, nearest + shipped + plan.suggested()):
        if config_key(config) in valid and config not in out:
            out.append(config)
    return out


def shipped_default(plan: Plan, why_invalid) -> list[dict[str, Value]]:
    """The op's shipped default configuration for the plan's problem on its GPU architecture (ops/shipped.py), as
    one list entry; none on the CPU, where an op ships none, or where no entry is valid."""
    from tracea_cli.ops import shipped

    defaults = shipped.read_shipped(plan.problem.op) if plan.backend.name == "cuda" else None
    if defaults is None:
        return []
    pick, _reasons = shipped.first_valid(defaults, plan.problem, plan.target.arch, why_invalid,
                                         plan.backend.config_in)
    return [pick.config] if pick is not None else []


def pool(plan: Plan, settings, executor: str = "local", address: str | None = None) -> Any:
    """The executor that runs this plan's jobs (tune/executor.py): the local worker pool, or Ray."""
    from tracea_cli.tune.executor import make_executor

    return make_executor(executor, plan, settings, address=address)


def start_pool(plan: Plan, settings, executor: str = "local", address: str | None = None) -> Any:
    """`pool`'s executor, being made (tune/executor.StartingExecutor: Ray's in the background); `take()` it."""
    from tracea_cli.tune.executor import start_executor

    return start_executor(executor, plan, settings, address=address)


def jobs(plan: Plan, configs, policy: TimingPolicy, seed: int) -> Iterator[EvalJob]:
    """Jobs for the pool. CUDA configurations are compiled here, in parallel, and each job is yielded as soon as its
    compile ends, fastest first: one slow compile (ptxas can take tens of seconds on a large unrolled tile) no longer
    holds back the measuring of the others. On the CPU the worker compiles."""
    def job(i: int, config, artifact=None) -> EvalJob:
        return EvalJob(seed + i, plan.problem, dict(config), plan.target, policy, seed + i, artifact=artifact)

    if plan.target.backend != "cuda":
        return iter([job(i, c) for i, c in enumerate(configs)])
    return _compiled_as_ready(plan, list(configs), job)


def _compiled_as_ready(plan: Plan, configs: list, job) -> Iterator[EvalJob]:
    """NVRTC through ctypes releases the GIL: a thread pool keeps the compiler busy on every core."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    def build(config):
        try:
            return plan.backend.compile(plan.problem, config, plan.target)
        except CompileFailed:
            return None  # the worker compiles again and records the failure with its log

    executor = ThreadPoolExecutor(max_workers=os.cpu_count() or 2)
    try:
        futures = {executor.submit(build, c): i for i, c in enumerate(configs)}
        for done in as_completed(futures):
            i = futures[done]
            yield job(i, configs[i], done.result())
    finally:  # interrupted or finished: nothing waits for compiles nobody will use
        executor.shutdown(wait=False, cancel_futures=True)


def baseline_job(plan: Plan, policy: TimingPolicy, name: str = "auto") -> EvalJob:
    return EvalJob(-1, plan.problem, {}, plan.target, policy, seed=BASELINE_SEED, kind="baseline", baseline=name)


def retarget(job: EvalJob, device: int | None) -> EvalJob:
    if device is None or job.target.device_index == device:
        return job
    from dataclasses import replace

    return replace(job, target=replace(job.target, device_index=device))


def trial(config: Mapping[str, Value], ev: Evaluation):
    from tracea_cli.cache import Trial

    return Trial.from_evaluation(config, ev)


def evaluation_of(t) -> Evaluation:
    samples = Samples(tuple(t.samples_ms), (False,) * len(t.samples_ms), 0.0) if t.samples_ms else None
    return Evaluation(Status(t.status), t.reason, samples, t.rel_error, t.compile_s)


def describe_target(target: Target) -> dict[str, Any]:
    return {"backend": target.backend, "device_class": target.device_class, "arch": target.arch,
            "device_index": target.device_index, "threads": target.threads}


def key_is_current(key) -> bool:
    """True when a stored key's source hash is the one `plan` computes now for its problem and backend: the same
    code that made the key answers (`tracea cache prune` removes only keys for which this is False). Raises
    UsageError when the key's op or backend is not in this installation."""
    problem = get_op(key.op).from_key(key.dtype, key.problem_dict)
    return OpBackend(key.op, key.backend).source_hash(problem) == key.source_hash
