"""The live `Engine`: the tuning driver, the cache, the backend and the capability profile behind one small surface.

Everything that touches the machine or another subsystem for `tracea bench` goes through here, so the runner and
the reports stay pure and testable. Heavy modules (the backends, numba, CuPy) load when the engine is built.
"""

from __future__ import annotations

from typing import Any, Mapping

from tracea_cli import __version__
from tracea_cli.backends.base import Evaluation
from tracea_cli.bench.baselines import check_baseline
from tracea_cli.bench.results import Ceiling, Environment, HostLoad, TrialPoint, Tuning
from tracea_cli.bench.runner import ProgressFn, TunedKernel
from tracea_cli.doctor.ceilings import ceiling_from_profile
from tracea_cli.ops.registry import get_op
from tracea_cli.space import Value
from tracea_cli.target import Target
from tracea_cli.timing import TimingPolicy

ALL_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp64")
HOST_FIELDS = ("os", "os_release", "kernel", "machine", "python", "container", "packages")  # not the host name


def _as_dict(obj: Any) -> dict[str, Any]:
    """The profile (or a part of it) as plain data, whether it is a dataclass with `as_dict()` or a mapping."""
    if obj is None:
        return {}
    if isinstance(obj, Mapping):
        return dict(obj)
    if hasattr(obj, "as_dict"):
        return dict(obj.as_dict())
    if hasattr(obj, "__dict__"):
        return dict(vars(obj))
    return {}


def device_dtypes(target: Target) -> tuple[str, ...]:
    """The dtypes a device has the arithmetic for: every one on the host; on a GPU, tf32 and bf16 need Ampere (sm_80)
    or later, fp16 tensor cores Volta or later. An op runs those of them its families have (`Op.dtypes`)."""
    if target.backend != "cuda":
        return ALL_DTYPES
    cc = target.limits.compute_capability if target.limits else (0, 0)
    if cc >= (8, 0):
        return ALL_DTYPES
    return ("fp32", "fp16", "fp64") if cc >= (7, 0) else ("fp32", "fp64")


class LiveEngine:
    """Built once per `tracea bench` run: resolves the backend and device, loads (or makes) the profile."""

    def __init__(self, settings, *, backend: str = "auto", devices: str | None = None, executor: str = "local",
                 ray_address: str | None = None) -> None:
        from tracea_cli.doctor.run import load_or_make_profile
        from tracea_cli.tune import setup
        from tracea_cli.tune.executor import check_executor

        check_executor(executor, ray_address)
        self.executor, self.ray_address = executor, ray_address
        self.settings = settings
        self.devices = devices
        self.backend_name = setup.resolve_backend(backend)
        self.profile = load_or_make_profile(settings)
        if self.backend_name == "cuda":
            from tracea_cli.devices import parse_devices
            from tracea_cli.doctor.profile import cuda_target

            index = parse_devices(devices, len(self.profile.cuda_gpus))[0]
            self.target = cuda_target(self.profile, index)
        else:
            if devices not in (None, "cpu"):
                from tracea_cli.errors import UsageError

                raise UsageError("--device chooses CUDA devices; the cpu backend uses this machine's CPU.", "Leave --device out.")
            from tracea_cli.doctor.profile import cpu_target

            self.target = cpu_target(self.profile)
        self._plans: dict[Any, Any] = {}
        self._pools: dict[Any, Any] = {}  # (op, backend, devices) -> an executor kept for the whole run

    def close(self) -> None:
        """Stop the tuning workers this engine started."""
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()

    def __enter__(self) -> "LiveEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what the runner asks ------------------------------------------------------------------------------------

    def check_baseline(self, choice: str, ops: tuple[str, ...]) -> None:
        check_baseline(choice, ops=ops, backend=self.backend_name)

    def dtypes(self) -> tuple[str, ...]:
        """The dtypes this device has the arithmetic for (built-in suites ask their ops for rows in them)."""
        return device_dtypes(self.target)

    def unsupported(self, problem: Any) -> str | None:
        runs = [d for d in get_op(problem.op).dtypes.get(self.backend_name, ()) if d in self.dtypes()]
        if problem.dtype in runs:
            return None
        return f"the {self.backend_name} backend does not run {problem.op} in {problem.dtype} here (it runs {', '.join(runs) or 'none'})"

    def environment(self, *, suite: str, command: str, created: str) -> Environment:
        p = self.profile
        if self.backend_name == "cuda":
            from tracea_cli.doctor.profile import cuda_gpu

            device = cuda_gpu(p, self.target.device_index or 0).name
        else:
            device = p.cpu.model
        host = {k: v for k, v in _as_dict(p.host).items() if k in HOST_FIELDS}
        host["packages"] = {k: v for k, v in dict(host.get("packages") or {}).items() if v}
        if self.backend_name == "cuda":
            tc = _as_dict(p.toolchain)
            host.update({k: tc[k] for k in ("driver_version", "cuda_driver_version", "cuda_runtime_version", "nvrtc_version") if tc.get(k)})
        return Environment(
            tracea_version=__version__,
            created=created,
            command=command,
            suite=suite,
            backend=self.backend_name,
            device=device,
            device_class=self.target.device_class,
            arch=self.target.arch,
            machine_id=p.machine_id,
            profile_schema_version=p.schema_version,
            profile_created=p.measured_created or p.created,
            host=host,
        )

    def load(self) -> HostLoad | None:
        import os

        try:
            now = os.getloadavg()[0]
        except (AttributeError, OSError):  # not on every platform
            return None
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return HostLoad(start=now, end=now, cpu_threads=threads)

    def load_meter(self) -> Any:
        from tracea_cli.host_load import LoadMeter

        return LoadMeter()

    def ceiling(self, problem: Any) -> Ceiling:
        c = ceiling_from_profile(self.profile, backend=self.backend_name, dtype=problem.dtype,
                                 device_index=self.target.device_index)
        return Ceiling(c.flops_per_s, c.bytes_per_s, c.flops_source, c.bytes_source)

    def tuned(self, problem: Any, *, budget: int | None, seed: int, progress: ProgressFn) -> TunedKernel | None:
        from tracea_cli.cache import TuningCache
        from tracea_cli.tune.driver import TuneRequest, tune

        plan = self._plan(problem)
        if budget is None:
            with TuningCache.open(self.settings.cache_path) as cache:
                winner = cache.winner(plan.key)
                trials = cache.trials(plan.key)
            if winner is None:
                return None
            failures = tuple({"config": dict(t.config), "status": t.status, "reason": t.reason} for t in trials if not t.ok)
            tuning = Tuning(key=plan.key.id, cache_hit=True, evaluations=0, trials_total=len(trials), stopped_because="cached (--no-tune)", failures=failures)
            return TunedKernel(config=dict(winner.config), tuning=tuning)
        request = TuneRequest(problem, backend=self.backend_name, devices=self.devices, budget=budget, seed=seed)
        result = tune(request, settings=self.settings, progress=progress, pool=self._pool(plan))
        failures = tuple({"config": dict(f.config), "status": f.status, "reason": f.reason} for f in result.failures)
        tuning = Tuning(key=result.key, cache_hit=result.cache_hit, evaluations=result.evaluations, trials_total=result.trials_total,
                        stopped_because=result.stopped_because, failures=failures)
        return TunedKernel(config=dict(result.winner.config) if result.winner else None, tuning=tuning)

    def trials(self, problem: Any) -> tuple[TrialPoint, ...]:
        from tracea_cli.cache import TuningCache
        from tracea_cli.cache.records import iso_time

        with TuningCache.open(self.settings.cache_path) as cache:
            trials = sorted(cache.trials(self._plan(problem).key), key=lambda t: t.timestamp)
        return tuple(TrialPoint(index=i + 1, status=t.status, median_ms=t.median_ms if t.ok else None, timestamp=iso_time(t.timestamp))
                     for i, t in enumerate(trials))

    def measure(self, problem: Any, config: Mapping[str, Value], *, policy: TimingPolicy, seed: int) -> Evaluation:
        from tracea_cli.tune.workers import EvalJob, run_job

        plan = self._plan(problem)
        return run_job(plan.backend, EvalJob(0, problem, dict(config), plan.target, policy, seed))

    def baseline(self, choice: str, problem: Any, *, policy: TimingPolicy, seed: int) -> tuple[str, Evaluation]:
        """The baseline `choice` (auto: the op's default library on this backend) on the inputs the tuned kernel gets
        from the same seed, checked and timed the same way, in this process."""
        from tracea_cli.tune.workers import EvalJob, run_baseline

        plan = self._plan(problem)
        job = EvalJob(-1, problem, {}, plan.target, policy, seed, kind="baseline", baseline=choice)
        name, ev = run_baseline(plan.backend, job)
        return name or choice, ev

    # -- internals -----------------------------------------------------------------------------------------------

    def _pool(self, plan):
        """One set of workers per op for every problem of the run: each starts (imports, CUDA context) once."""
        key = (plan.backend.op_name, plan.backend.name, plan.devices)
        if key not in self._pools:
            from tracea_cli.tune import setup

            self._pools[key] = setup.pool(plan, self.settings, self.executor, self.ray_address)
        return self._pools[key]

    def _plan(self, problem: Any):
        plan = self._plans.get(problem)
        if plan is None:
            from tracea_cli.tune import setup
            from tracea_cli.tune.driver import TuneRequest

            plan = setup.plan(TuneRequest(problem, backend=self.backend_name, devices=self.devices, budget=1), self.settings)
            self._plans[problem] = plan
        return plan
