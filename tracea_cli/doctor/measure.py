"""Measured ceilings: what this machine achieves, each figure a median over repeats with its noise, in bounded time.

CPU: STREAM-triad bandwidth (a numba kernel that releases the GIL, run on 1 and on all usable threads) and GEMM
GFLOP/s through numpy's BLAS with 1 and all threads (threadpoolctl). GPU (CuPy): device-memory bandwidth as the
better of cudaMemcpy and a vectorised copy kernel (bytes read + written), GEMM FLOP/s per dtype with
`cupy.matmul` at up to 8192³ on random inputs (two input sets, alternated), kernel launch latency, and pinned
host<->device bandwidth; fp8 and int8 through torch where it is installed. Every GEMM is checked against a float64
reference before it is timed. Timing is `tracea_cli.timing.measure`; statistics are `tracea_cli.stats.summarize`.

Each measurement that cannot be made becomes a `NotMeasured` with the reason; nothing here raises for a device fault.
"""

from __future__ import annotations

import functools
import importlib.util
import time
from dataclasses import replace
from typing import Any, Callable, Iterator

from tracea_cli.doctor.datasheets import Datasheet, match_datasheet
from tracea_cli.doctor.profile import CpuInfo, GpuInfo, Measurement, NotMeasured, now_iso
from tracea_cli.timing import HostClock, Samples, TimingPolicy, measure

MIB = 1024**2
GIB = 1024**3

CPU_POLICY = TimingPolicy(warmup=1, min_samples=5, max_samples=50, target_cv=0.02, max_seconds=0.5)
#: one triad sample streams hundreds of MiB, so few samples suffice
TRIAD_POLICY = TimingPolicy(warmup=1, min_samples=3, max_samples=20, target_cv=0.03, max_seconds=0.5)
GPU_POLICY = TimingPolicy(warmup=3, min_samples=10, max_samples=200, target_cv=0.01, max_seconds=0.6)
GPU_GEMM_DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp64")
GEMM_SIZES = (8192, 4096, 2048)

Item = Measurement | NotMeasured
Step = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def summarize_rates(samples: Samples, *, work: float, device: str, metric: str, unit: str, **fields: Any) -> Measurement:
    """A rate measurement (work per second) from raw per-run times; statistics over the per-sample rates."""
    from tracea_cli.stats import summarize

    rates = [work / (t / 1e3) for t in samples.times_ms if t > 0]
    if not rates:
        raise RuntimeError("the clock returned no positive time")
    s = summarize(rates)
    throttled = sum(samples.throttled) / samples.n if samples.n else 0.0
    return Measurement(device=device, metric=metric, unit=unit, median=s.median, cv=s.cv, n=s.n, q1=s.q1, q3=s.q3,
                       throttled_fraction=throttled, created=now_iso(), **fields)


def _guarded(fn: Callable[[], list[Item]], *, device: str, metric: str, dtype: str | None = None,
             threads: int | None = None) -> list[Item]:
    """Run one measurement; an exception (out of memory, a library missing) becomes a NotMeasured with its reason."""
    try:
        return fn()
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:
        text = " ".join(str(e).split())[:300]
        return [NotMeasured(device, metric, f"{type(e).__name__}: {text}", dtype=dtype, threads=threads)]


# -------------------------------------------------------------------------------------------------------------- CPU


@functools.lru_cache(maxsize=1)
def _triad_kernel() -> Callable:
    import numba

    @numba.njit(nogil=True, fastmath=True, cache=False)
    def triad(a, b, c, scalar):  # a = b + scalar * c: reads b and c, writes a (STREAM's triad)
        for i in range(a.size):
            a[i] = b[i] + scalar * c[i]

    return triad


def _triad_elements(cpu: CpuInfo) -> int:
    """Array length: the three arrays together at least 1.5 times the last-level cache, so that the cyclic sweep
    streams from memory (an LRU cache smaller than the sweep keeps nothing); 32..256 MiB per array."""
    llc = max((v for k, v in cpu.caches.items() if k in ("L3", "L2")), default=16 * MIB)
    nbytes = min(max(llc // 2, 32 * MIB), 256 * MIB)
    if cpu.memory_available_bytes:
        nbytes = min(nbytes, cpu.memory_available_bytes // 16)
    return max(nbytes // 8, 1 << 20)


def cpu_triad(cpu: CpuInfo, thread_counts: tuple[int, ...], *, policy: TimingPolicy = TRIAD_POLICY) -> list[Item]:
    import numpy as np
    from concurrent.futures import ThreadPoolExecutor

    kernel = _triad_kernel()
    n = _triad_elements(cpu)
    a, b, c = np.empty(n), np.full(n, 1.5), np.full(n, 0.5)
    kernel(a, b, c, 3.0)
    probe = np.random.default_rng(0).integers(0, n, 1024)
    if not np.allclose(a[probe], 3.0):  # 1.5 + 3 * 0.5
        raise RuntimeError("the triad kernel computed a wrong result")
    out: list[Item] = []
    for threads in thread_counts:
        bounds = np.linspace(0, n, threads + 1).astype(np.int64)
        parts = [(a[lo:hi], b[lo:hi], c[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]
        with ThreadPoolExecutor(threads) as pool:  # the kernel releases the GIL: one slice per thread

            def run() -> None:
                list(pool.map(lambda p: kernel(p[0], p[1], p[2], 3.0), parts))

            samples = measure(run, clock=HostClock(), policy=policy)
        out.append(summarize_rates(samples, work=3 * 8 * n, device="cpu", metric="memory_bandwidth", unit="B/s",
                                   threads=threads, params={"method": "STREAM triad a = b + s*c (numba)",
                                                            "array_bytes": 8 * n, "bytes_counted": "read b, c + write a"}))
    return out


def cpu_gemm(dtype: str, thread_counts: tuple[int, ...], *, policy: TimingPolicy = CPU_POLICY) -> list[Item]:
    import numpy as np
    from threadpoolctl import threadpool_info, threadpool_limits

    from tracea_cli.ops.verify import check

    np_dtype = {"fp32": np.float32, "fp64": np.float64}[dtype]
    rng = np.random.default_rng(1)
    blas = next((f"{i['internal_api']} {i['version']}" for i in threadpool_info() if i.get("user_api") == "blas"), "BLAS")
    out: list[Item] = []
    for threads in thread_counts:
        with threadpool_limits(limits=threads, user_api="blas"):
            # 1024^3, or bigger where one run is too short to keep every thread busy (large many-core machines)
            n = 512
            elapsed = 0.0
            while elapsed < 0.02 and n < 4096:
                n *= 2
                a, b = (rng.uniform(-1, 1, (n, n)).astype(np_dtype) for _ in range(2))
                c = np.empty((n, n), np_dtype)
                t0 = time.perf_counter()
                np.matmul(a, b, out=c)
                elapsed = time.perf_counter() - t0
            verdict = check(c[:32].astype(np.float64), a[:32].astype(np.float64) @ b.astype(np.float64), dtype)
            if not verdict.ok:
                out.append(NotMeasured("cpu", "gemm_flops", f"numpy's matmul gave a wrong result: {verdict.reason}",
                                       dtype=dtype, threads=threads))
                continue
            samples = measure(lambda: np.matmul(a, b, out=c), clock=HostClock(), policy=policy)
        out.append(summarize_rates(samples, work=2.0 * n**3, device="cpu", metric="gemm_flops", unit="FLOP/s",
                                   dtype=dtype, threads=threads,
                                   params={"method": f"numpy.matmul ({blas})", "m": n, "n": n, "k": n}))
    return out


def _metered(fn: Callable[[], list[Item]]) -> list[Item]:
    """Run `fn`; when other processes competed for the CPUs meanwhile, its measurements say so (`busy`)."""
    from dataclasses import replace

    from tracea_cli.host_load import LoadMeter

    meter = LoadMeter()
    items = fn()
    during = meter.stop()
    if during is None or not during.busy:
        return items
    return [replace(i, busy=during.text) if isinstance(i, Measurement) else i for i in items]


def cpu_measurements(cpu: CpuInfo, *, step: Step = _quiet, policy: TimingPolicy = CPU_POLICY) -> Iterator[Item]:
    counts = (1,) if cpu.usable_threads <= 1 else (1, cpu.usable_threads)
    step("CPU memory bandwidth (triad)")
    yield from _metered(lambda: _guarded(lambda: cpu_triad(cpu, counts), device="cpu", metric="memory_bandwidth"))
    for dtype in ("fp32", "fp64"):
        step(f"CPU GEMM {dtype}")
        yield from _metered(lambda: _guarded(lambda: cpu_gemm(dtype, counts, policy=policy), device="cpu",
                                             metric="gemm_flops", dtype=dtype))


# -------------------------------------------------------------------------------------------------------------- GPU

_COPY_KERNEL = r"""
extern "C" __global__ void tracea_copy(const float4* __restrict__ src, float4* __restrict__ dst, unsigned long long n) {
  // each thread moves 4 float4s, blockDim apart, so every load and store is coalesced; loads first, then stores
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x * 4 + threadIdx.x;
  float4 v[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) if (i + k * blockDim.x < n) v[k] = src[i + k * blockDim.x];
#pragma unroll
  for (int k = 0; k < 4; ++k) if (i + k * blockDim.x < n) dst[i + k * blockDim.x] = v[k];
}
"""
_EMPTY_KERNEL = 'extern "C" __global__ void tracea_empty() {}'


class _GpuContext:
    """What every GPU measurement needs: CuPy, the device, an event clock on the current stream, a throttle probe."""

    def __init__(self, gpu: GpuInfo, *, policy: TimingPolicy, throttle: Callable[[], bool] | None) -> None:
        import cupy

        from tracea_cli.backends.cuda_clock import CudaEventClock

        self.cp = cupy
        self.gpu = gpu
        self.label = f"cuda:{gpu.cuda_index}"
        self.policy = policy
        self.throttle = throttle
        self.clock = CudaEventClock()

    def time(self, run: Callable[[], object], *, prepare: Callable[[], object] | None = None) -> Samples:
        return measure(run, clock=self.clock, policy=self.policy, prepare=prepare, throttle_probe=self.throttle)

    def free(self) -> None:
        self.cp.get_default_memory_pool().free_all_blocks()
        self.cp.get_default_pinned_memory_pool().free_all_blocks()

    def measurement(self, samples: Samples, **fields: Any) -> Measurement:
        return summarize_rates(samples, device=self.label, device_class=self.gpu.device_class, **fields)


def gpu_bandwidth(g: _GpuContext) -> list[Item]:
    import numpy as np

    cp = g.cp
    free, _ = cp.cuda.runtime.memGetInfo()
    nbytes = min(2 * GIB, (free // 4) // (16 * MIB) * 16 * MIB)
    if nbytes < 64 * MIB:
        return [NotMeasured(g.label, "memory_bandwidth", f"only {free // MIB} MiB of device memory is free")]
    src = cp.random.random(nbytes // 4, dtype=cp.float32) + 0.5
    dst = cp.empty_like(src)
    kernel = cp.RawKernel(_COPY_KERNEL, "tracea_copy")
    n4 = nbytes // 16
    blocks = (n4 + 1023) // 1024  # 256 threads x 4 float4 per block
    methods = {
        "cudaMemcpy (cupy.copyto)": lambda: cp.copyto(dst, src),
        "copy kernel (float4)": lambda: kernel((blocks,), (256,), (src, dst, np.uint64(n4))),
    }
    results = {}
    for name, run in methods.items():
        dst.fill(0)
        run()
        if not bool((dst == src).all()):
            return [NotMeasured(g.label, "memory_bandwidth", f"the {name} copy gave a wrong result")]
        results[name] = g.measurement(g.time(run), work=2 * nbytes, metric="memory_bandwidth", unit="B/s",
                                      params={"bytes_per_copy": nbytes, "bytes_counted": "read + write"})
    best_name, best = max(results.items(), key=lambda kv: kv[1].median)
    params = {**best.params, "method": best_name,
              "methods": {k: {"median": v.median, "cv": v.cv} for k, v in results.items()}}
    return [replace(best, params=params)]


def _np_dtype(dtype: str) -> Any:
    import numpy as np

    if dtype == "bf16":
        try:
            import ml_dtypes
        except ImportError:
            raise RuntimeError("bf16 arrays in CuPy need ml_dtypes: pip install ml_dtypes") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"fp64": np.float64, "fp32": np.float32, "tf32": np.float32, "fp16": np.float16}[dtype])


class _ComputeType:
    """CuPy's cuBLAS compute type for float32 set to TF32 for the duration (CUPY_TF32=1 does the same at start-up)."""

    def __init__(self, cp: Any, tf32: bool) -> None:
        import importlib

        import numpy as np

        self._linalg = importlib.import_module("cupy._core._routines_linalg") if tf32 else None
        self._np = np
        self._saved = None

    def __enter__(self) -> "_ComputeType":
        if self._linalg is not None:
            self._saved = self._linalg.get_compute_type(self._np.float32)
            self._linalg.set_compute_type(self._np.float32, getattr(self._linalg, "COMPUTE_TYPE_TF32", 7))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._linalg is not None and self._saved is not None:
            self._linalg.set_compute_type(self._np.float32, self._saved)


def gpu_gemm(g: _GpuContext, dtype: str) -> list[Item]:
    cp = g.cp
    cc = g.gpu.compute_capability or (0, 0)
    if dtype in ("bf16", "tf32") and cc < (8, 0):
        return [NotMeasured(g.label, "gemm_flops", f"{dtype} tensor cores need sm_80 or newer", dtype=dtype)]
    np_dtype = _np_dtype(dtype)
    free, _ = cp.cuda.runtime.memGetInfo()

    def random(n: int) -> Any:
        return (cp.random.random((n, n), dtype=cp.float32) * 2 - 1).astype(np_dtype)

    with _ComputeType(cp, tf32=dtype == "tf32"):
        # the largest size whose working set fits and whose single run stays short (fp64 on GeForce is slow)
        # working set: 4 inputs + 1 output, float32 temporaries while filling, the float64 copy of B for the check
        n = next((s for s in GEMM_SIZES if s * s * (5 * np_dtype.itemsize + 16) < free * 0.8), None)
        if n is None:
            return [NotMeasured(g.label, "gemm_flops", f"only {free // MIB} MiB of device memory is free", dtype=dtype)]
        base = GEMM_SIZES[-1]
        small = random(base), random(base)
        cp.matmul(*small)
        g.clock.start()
        cp.matmul(*small)
        base_ms = g.clock.stop()
        while n > base and base_ms * (n / base) ** 3 > 100.0:  # one run at most ~0.1 s
            n //= 2
        del small
        pairs = [(random(n), random(n)), (random(n), random(n))]
        c = cp.empty((n, n), dtype=np_dtype)
        cp.matmul(*pairs[0], out=c)
        verdict = _check_rows(cp, c, *pairs[0], dtype)
        if not verdict.ok:
            return [NotMeasured(g.label, "gemm_flops", f"cupy.matmul gave a wrong result: {verdict.reason}", dtype=dtype)]
        turn = [0]

        def rotate() -> None:  # alternate input sets between samples, so no run reuses the previous one's cache
            turn[0] ^= 1

        samples = g.time(lambda: cp.matmul(*pairs[turn[0]], out=c), prepare=rotate)
    return [g.measurement(samples, work=2.0 * n**3, metric="gemm_flops", unit="FLOP/s", dtype=dtype,
                          params={"method": "cupy.matmul (cuBLAS)" + (", TF32 compute type" if dtype == "tf32" else ""),
                                  "m": n, "n": n, "k": n, "rel_error": verdict.rel_error})]


def _check_rows(cp: Any, c: Any, a: Any, b: Any, dtype: str, rows: int = 64) -> Any:
    """The correctness policy on the first `rows` rows: relative Frobenius error against a float64 product."""
    from tracea_cli.ops.verify import check

    def f64(x: Any) -> Any:  # through float32, which holds fp16/bf16/tf32 values exactly (the plainest cast)
        return x if x.dtype == cp.float64 else x.astype(cp.float32).astype(cp.float64)

    ref = f64(a[:rows]) @ f64(b)
    return check(cp.asnumpy(f64(c[:rows])), cp.asnumpy(ref), dtype)


def gpu_launch_latency(g: _GpuContext) -> list[Item]:
    cp = g.cp
    kernel = cp.RawKernel(_EMPTY_KERNEL, "tracea_empty")
    stream = cp.cuda.get_current_stream()

    def run() -> None:
        kernel((1,), (1,), ())
        stream.synchronize()

    samples = measure(run, clock=HostClock(), policy=replace(g.policy, inner_repeats=100))
    from tracea_cli.stats import summarize

    s = summarize([t * 1e3 for t in samples.times_ms])
    return [Measurement(device=g.label, metric="launch_latency", unit="us", median=s.median, cv=s.cv, n=s.n,
                        q1=s.q1, q3=s.q3, device_class=g.gpu.device_class, created=now_iso(),
                        params={"method": "empty kernel launch + stream synchronize, host clock, 100 per sample"})]


def gpu_transfers(g: _GpuContext) -> list[Item]:
    import numpy as np

    cp = g.cp
    rt = cp.cuda.runtime
    free, _ = rt.memGetInfo()
    nbytes = min(256 * MIB, free // 8 // MIB * MIB)
    pinned = cp.cuda.alloc_pinned_memory(nbytes)
    host = np.frombuffer(pinned, dtype=np.uint8, count=nbytes)
    host.fill(0x5A)
    dev = cp.empty(nbytes, dtype=cp.uint8)
    stream = g.clock.stream
    out: list[Item] = []
    for metric, dst, src, kind in (("h2d_bandwidth", dev.data.ptr, host.ctypes.data, rt.memcpyHostToDevice),
                                   ("d2h_bandwidth", host.ctypes.data, dev.data.ptr, rt.memcpyDeviceToHost)):
        def run(dst: int = dst, src: int = src, kind: int = kind) -> None:
            rt.memcpyAsync(dst, src, nbytes, kind, stream.ptr)

        run()
        stream.synchronize()
        if metric == "h2d_bandwidth" and int(dev[-1]) != 0x5A:
            out.append(NotMeasured(g.label, metric, "the host-to-device copy gave a wrong result"))
            continue
        out.append(g.measurement(g.time(run), work=nbytes, metric=metric, unit="B/s",
                                 params={"bytes_per_copy": nbytes, "host_memory": "pinned"}))
    return out


def gpu_low_precision(g: _GpuContext) -> list[Item]:
    """int8 and fp8 GEMM through torch (cupy.matmul has no tensor-core path for them)."""
    cc = g.gpu.compute_capability or (0, 0)
    if importlib.util.find_spec("torch") is None:
        reason = "no library here does it: cupy.matmul has no int8/fp8 tensor-core path and torch is not installed"
        return [NotMeasured(g.label, "gemm_flops", reason, dtype=d) for d in ("int8", "fp8")]
    import torch

    out: list[Item] = []
    device = torch.device("cuda", g.gpu.cuda_index)
    stream = g.cp.cuda.ExternalStream(torch.cuda.current_stream(device).cuda_stream)
    from tracea_cli.backends.cuda_clock import CudaEventClock

    clock = CudaEventClock(stream)
    n = 8192
    for dtype in ("int8", "fp8"):
        def one() -> list[Item]:
            if dtype == "fp8" and cc < (8, 9):
                return [NotMeasured(g.label, "gemm_flops", "fp8 tensor cores need sm_89 or newer", dtype="fp8")]
            if dtype == "int8":
                a = torch.randint(-127, 128, (n, n), dtype=torch.int8, device=device)
                b = torch.randint(-127, 128, (n, n), dtype=torch.int8, device=device).t()  # column-major, as cuBLASLt wants

                def run() -> Any:
                    return torch._int_mm(a, b)
            else:
                a = (torch.rand(n, n, device=device) * 2 - 1).to(torch.float8_e4m3fn)
                b = (torch.rand(n, n, device=device) * 2 - 1).to(torch.float8_e4m3fn).t()
                one_scale = torch.ones((), device=device)

                def run() -> Any:
                    return torch._scaled_mm(a, b, scale_a=one_scale, scale_b=one_scale, out_dtype=torch.bfloat16)

            c = run()
            c = c[0] if isinstance(c, tuple) else c  # older torch returned (out, amax)
            if dtype == "fp8":
                ref = a[:4].float().double().cpu() @ b[:, :256].float().double().cpu()
            else:
                ref = a[:4].cpu().long() @ b[:, :256].cpu().long()
            got = c[:4, :256].cpu()
            if dtype == "int8":
                if not torch.equal(got.long(), ref):
                    return [NotMeasured(g.label, "gemm_flops", "torch._int_mm gave a wrong result", dtype=dtype)]
            else:
                err = float((got.double() - ref).norm() / ref.norm())
                if not err <= 2e-2:
                    return [NotMeasured(g.label, "gemm_flops", f"torch._scaled_mm: relative error {err:.3g}", dtype=dtype)]
            samples = measure(run, clock=clock, policy=g.policy, throttle_probe=g.throttle)
            unit = "OP/s" if dtype == "int8" else "FLOP/s"
            method = "torch._int_mm (cuBLASLt)" if dtype == "int8" else "torch._scaled_mm e4m3, bf16 out (cuBLASLt)"
            return [summarize_rates(samples, work=2.0 * n**3, device=g.label, metric="gemm_flops", unit=unit, dtype=dtype,
                                    device_class=g.gpu.device_class, params={"method": method, "m": n, "n": n, "k": n})]

        out += _guarded(one, device=g.label, metric="gemm_flops", dtype=dtype)
        torch.cuda.empty_cache()
    return out


def gpu_measurements(gpu: GpuInfo, *, step: Step = _quiet, policy: TimingPolicy = GPU_POLICY,
                     throttle: Callable[[], bool] | None = None, deadline: float = float("inf")) -> Iterator[Item]:
    """Every GPU ceiling of one device. Work past `deadline` (time.monotonic) is skipped, with that reason."""
    label = f"cuda:{gpu.cuda_index}"
    try:
        import cupy

        device = cupy.cuda.Device(gpu.cuda_index)
    except Exception as e:
        yield NotMeasured(label, "all", f"CuPy cannot use this GPU ({type(e).__name__}: {e})")
        return
    with device:  # events, streams and arrays below belong to this device
        try:
            g = _GpuContext(gpu, policy=policy, throttle=throttle)
        except Exception as e:
            yield NotMeasured(label, "all", f"CuPy cannot use this GPU ({type(e).__name__}: {e})")
            return
        # (progress text, the (metric, dtype) figures it makes, how)
        plan: list[tuple[str, tuple[tuple[str, str | None], ...], Callable[[], list[Item]]]] = [
            ("device memory bandwidth", (("memory_bandwidth", None),), lambda: gpu_bandwidth(g)),
            *[(f"GEMM {d}", (("gemm_flops", d),), functools.partial(gpu_gemm, g, d)) for d in GPU_GEMM_DTYPES],
            ("launch latency", (("launch_latency", None),), lambda: gpu_launch_latency(g)),
            ("host<->device bandwidth", (("h2d_bandwidth", None), ("d2h_bandwidth", None)), lambda: gpu_transfers(g)),
            ("GEMM int8/fp8", (("gemm_flops", "int8"), ("gemm_flops", "fp8")), lambda: gpu_low_precision(g)),
        ]
        for text, figures, fn in plan:
            if time.monotonic() > deadline:
                for metric, dtype in figures:
                    yield NotMeasured(label, metric, "the doctor's time budget was spent before this measurement", dtype=dtype)
                continue
            step(f"{label} {text}")
            items = _guarded(fn, device=label, metric=figures[0][0], dtype=figures[0][1])
            g.free()  # the measurement's arrays are gone with its frame: return their memory before the next one
            yield from items


# ------------------------------------------------------------------------------------------------------ references

_PCIE_LANE_BYTES_PER_S = {  # per lane and direction, after line encoding
    1: 2.5e9 * 8 / 10 / 8, 2: 5e9 * 8 / 10 / 8, 3: 8e9 * 128 / 130 / 8, 4: 16e9 * 128 / 130 / 8,
    5: 32e9 * 128 / 130 / 8, 6: 64e9 * 242 / 256 / 8,
}


def pcie_link_rate(gpu: GpuInfo) -> tuple[float, str] | None:
    """The PCIe link's raw rate per direction (bytes/s) at its maximum generation and width, with a description."""
    pcie = gpu.details.get("pcie") or {}
    gen, width = pcie.get("generation_max"), pcie.get("width_max")
    if gen not in _PCIE_LANE_BYTES_PER_S or not width:
        return None
    return _PCIE_LANE_BYTES_PER_S[gen] * width, f"PCIe gen {gen} x{width} link rate per direction (PCI-SIG specification)"


def with_references(items: list[Measurement], *, gpus: tuple[GpuInfo, ...], cpu: CpuInfo,
                    datasheets: tuple[Datasheet, ...]) -> list[Measurement]:
    """Each measurement with the datasheet figure it should be read against (None when there is none)."""
    by_label = {g.label: g for g in gpus}
    by_name = {d.name: d for d in datasheets}
    cpu_sheet = match_datasheet(datasheets, name=cpu.model)  # Apple: the SoC's memory figures
    out = []
    for m in items:
        ref: tuple[float, str] | None = None
        if m.device == "cpu":
            if cpu_sheet and m.metric == "memory_bandwidth" and cpu_sheet.memory_bandwidth and m.threads != 1:
                ref = cpu_sheet.memory_bandwidth.value, cpu_sheet.memory_bandwidth.source
        elif (gpu := by_label.get(m.device)) is not None:
            if m.metric in ("h2d_bandwidth", "d2h_bandwidth"):
                ref = pcie_link_rate(gpu)
            elif gpu.datasheet and (sheet := by_name.get(gpu.datasheet)) is not None:
                fig = sheet.figure(m.metric, m.dtype)
                ref = (fig.value, fig.source) if fig else None
        out.append(replace(m, datasheet=ref[0], datasheet_source=ref[1]) if ref else m)
    return out
