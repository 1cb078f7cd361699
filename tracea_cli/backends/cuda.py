"""The CUDA backend for GEMM: NVRTC compiles the templates of kernels/cuda/ to cubin, CuPy loads and launches them.

Compiling needs no GPU (`CudaBackend.compile`, or `compile_config` for a named architecture). Running needs CuPy
and a device: `CudaBackend.evaluate` checks a kernel on fresh random inputs against the float64 reference with the
output poisoned (NaN), and only then times it with device events, L2 flushed between samples, the whole launch
sequence (split-K workspace zeroing and reduction included) inside the timed region. Kernel faults become typed
evaluations, never exceptions. `CudaBackend.baseline` times cuBLAS through `cupy.matmul` the same way.

CuPy is imported inside functions only: importing this module stays cheap and works without a GPU.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from tracea_cli.backends import nvrtc
from tracea_cli.backends.base import Artifact, CompileFailed, Evaluation, Status
from tracea_cli.errors import ToolchainMissing, UsageError
from tracea_cli.ops.dtypes import from_storage, to_storage
from tracea_cli.ops.gemm.cuda_space import (
    SPLITK_REDUCE_THREADS,
    cluster_k_of,
    gemm_space,
    slice_k_of,
    tiling,
)
from tracea_cli.ops.gemm.problem import GemmInputs, GemmProblem, make_inputs, reference
from tracea_cli.ops.verify import check
from tracea_cli.resources import kernel_source
from tracea_cli.space import Value, config_key
from tracea_cli.target import DeviceLimits, Target
from tracea_cli.timing import Samples, TimingPolicy, measure

GENERATOR_VERSION = 1  # bump when the text `gemm_source` generates around the templates changes
MAIN_KERNEL = "gemm_main"
REDUCE_KERNEL = "gemm_splitk_reduce"
HEADERS = {"simt": "cuda/gemm_simt.cuh", "mma": "cuda/gemm_mma.cuh"}
ELEMENT = {"fp32": "float", "tf32": "float", "fp16": "__half", "bf16": "__nv_bfloat16", "fp64": "double"}
EPILOGUE = {"none": "None", "bias": "Bias", "bias_relu": "BiasRelu", "bias_silu": "BiasSilu", "bias_gelu": "BiasGelu",
            "bias_residual": "BiasResidual"}
_CUPY_HINT = "Install the CUDA extra (pip install 'tracea[cuda]') on a machine with an NVIDIA GPU."
_INCLUDE = re.compile(r'^#include "([^"]+)"\s*$', re.M)


# ---- source ------------------------------------------------------------------------------------------------------

def _inline(relative: str, seen: set[str]) -> str:
    """The header's text with its quoted includes pasted in (once each): one self-contained translation unit."""
    if relative in seen:
        return ""
    seen.add(relative)
    folder = relative.rsplit("/", 1)[0]
    text = kernel_source(relative).replace("#pragma once\n", "")
    return _INCLUDE.sub(lambda m: _inline(f"{folder}/{m.group(1)}", seen), text)


@functools.lru_cache(maxsize=None)
def _template(family: str) -> str:
    return _inline(HEADERS[family], set())


def gemm_source(problem: GemmProblem, config: Mapping[str, Value]) -> str:
    """The exact, self-contained CUDA source of one configuration (what is compiled, hashed and exported)."""
    family = str(config["family"])
    t = tiling(problem, config)
    layout = "NN" if problem.layout == "nn" else "NT"
    head = (f"tracea::{'MmaGemm' if family == 'mma' else 'SimtGemm'}<{ELEMENT[problem.dtype]}, tracea::Layout::{layout}, "
            f"tracea::Epilogue::{EPILOGUE[problem.epilogue]}, ")
    if family == "mma":
        args = [config[p] for p in ("block_m", "block_n", "block_k", "warp_m", "warp_n", "stages", "vec", "split_k", "group_m")]
        cluster = cluster_k_of(config)
        if slice_k_of(config) > 1 or cluster > 1:  # 1 is the template's default: the instantiation of before
            args.append(slice_k_of(config))
        if cluster > 1:
            args.append(cluster)
        entry, bounds = "tracea::gemm_mma<Gemm>", "Gemm::THREADS"
    else:
        args = [config[p] for p in ("block_m", "block_n", "block_k", "warp_m", "warp_n", "vec", "split_k", "group_m")]
        entry, bounds = "tracea::gemm_simt<Gemm>", "Gemm::THREADS, Gemm::MIN_BLOCKS"  # blocks per SM: see the template
    lines = [
        f"// Tracea CUDA GEMM ({problem.dtype}, layout {problem.layout}, epilogue {problem.epilogue})",
        f"// configuration {config_key(config)}",
        _template(family),
        f"using Gemm = {head}{', '.join(str(int(a)) for a in args)}>;",
        f'static_assert(Gemm::THREADS == {t.threads}, "block size differs from the launch description");',
        f'static_assert(Gemm::SMEM_BYTES == {t.smem_bytes}, "shared memory differs from the launch description");',
        f"extern \"C\" __global__ void __launch_bounds__({bounds}) {_cluster_dims(config)}{MAIN_KERNEL}(TRACEA_GEMM_PARAMS) "
        f"{{ {entry}(TRACEA_GEMM_ARGS); }}",
    ]
    if int(config["split_k"]) > 1:
        lines.append(f"extern \"C\" __global__ void __launch_bounds__({SPLITK_REDUCE_THREADS}) {REDUCE_KERNEL}"
                     f"(TRACEA_GEMM_PARAMS) {{ tracea::splitk_reduce<Gemm::T, Gemm::EPILOGUE>(TRACEA_GEMM_ARGS); }}")
    return "\n".join(lines) + "\n"


def _cluster_z(config: Mapping[str, Value]) -> int | str:
    """Grid z: the split-K slices, or the blocks of a K cluster (a fixed number)."""
    cluster = cluster_k_of(config)
    return cluster if cluster > 1 else "split_k"


def _cluster_dims(config: Mapping[str, Value]) -> str:
    """The entry's compile-time cluster shape (an ordinary launch then makes the clusters), or nothing."""
    cluster = cluster_k_of(config)
    return f"__cluster_dims__(1, 1, {cluster}) " if cluster > 1 else ""


def launch_description(problem: GemmProblem, config: Mapping[str, Value]) -> dict[str, Any]:
    """How to run a configuration (docs/kernel-abi.md): memsets and kernels in order, with grid rules."""
    t = tiling(problem, config)
    split = int(config["split_k"])
    steps: list[dict[str, Any]] = []
    if split > 1:
        steps.append({"kind": "memset", "buffer": "workspace", "bytes_per": "mn", "elem_bytes": 4})
    steps.append({"kind": "kernel", "name": MAIN_KERNEL, "block": [t.threads, 1, 1],
                  "grid": {"x": "tiles", "y": 1, "z": _cluster_z(config)}, "dynamic_smem_bytes": t.smem_bytes})
    if split > 1:
        steps.append({"kind": "kernel", "name": REDUCE_KERNEL, "block": [SPLITK_REDUCE_THREADS, 1, 1],
                      "grid": {"x": f"mn/{SPLITK_REDUCE_THREADS}", "y": 1, "z": 1}, "dynamic_smem_bytes": 0})
    return {
        "steps": steps,
        "tile_m": int(config["block_m"]),
        "tile_n": int(config["block_n"]),
        "split_k": split,
        "workspace_bytes_per_mn": 4 if split > 1 else 0,
        "alignment_bytes": t.copy_bytes,
    }


_DIVIDED_RULE = re.compile(r"(mn|m|n|k)/([1-9][0-9]*)")  # the forms export/c_header.grid_rule accepts


def grid_extent(rule: Any, launch: Mapping[str, Any], m: int, n: int, k: int) -> int:
    """One grid dimension of an M x N x K call from its rule in a launch description (docs/kernel-abi.md): an
    integer; "tiles", "tiles_m", "tiles_n" (output tiles of tile_m x tile_n); "split_k"; "mn/Q", "m/Q", "n/Q", "k/Q"
    (the size divided by Q, rounded up). The Hopper family's cluster rules need the device: cuda_hopper sizes those."""
    if isinstance(rule, int):
        return rule
    if rule in ("tiles", "tiles_m", "tiles_n"):
        tiles_m, tiles_n = -(-m // int(launch["tile_m"])), -(-n // int(launch["tile_n"]))
        return {"tiles": tiles_m * tiles_n, "tiles_m": tiles_m, "tiles_n": tiles_n}[rule]
    if rule == "split_k":
        return int(launch["split_k"])
    divided = _DIVIDED_RULE.fullmatch(rule) if isinstance(rule, str) else None
    if divided:
        size = {"mn": m * n, "m": m, "n": n, "k": k}[divided.group(1)]
        return -(-size // int(divided.group(2)))
    raise ValueError(f"unknown grid rule {rule!r}")


# ---- compiling ---------------------------------------------------------------------------------------------------

def source_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_COMPILED_KEEP = 256  # programs kept per process
_compiled: dict[tuple[str, str], Future] = {}  # (source digest, arch) -> the one compile of that program
_compiled_lock = threading.Lock()
_retry_lock = threading.Lock()


def _compile_program(source: str, arch: str) -> nvrtc.CompiledProgram:
    program = nvrtc.compile_source(source, nvrtc.CompileOptions(arch=arch), name="tracea_gemm.cu", want_ptx=True)
    if MAIN_KERNEL not in program.resources:  # no ptxas report: once more, alone (see docs/engine.md)
        with _retry_lock:
            program = nvrtc.compile_source(source, nvrtc.CompileOptions(arch=arch), name="tracea_gemm.cu", want_ptx=True)
    return program


def _compile_once(source: str, arch: str) -> nvrtc.CompiledProgram:
    """Compile a program once per process: threads asking for the same one wait for the first compile."""
    key = (hashlib.sha256(source.encode()).hexdigest(), arch)
    with _compiled_lock:
        pending = _compiled.get(key)
        owner = pending is None
        if owner:
            pending = _compiled[key] = Future()
            while len(_compiled) > _COMPILED_KEEP:
                del _compiled[next(iter(_compiled))]
    if owner:
        try:
            pending.set_result(_compile_program(source, arch))
        except BaseException as e:  # not kept: a later call compiles afresh
            with _compiled_lock:
                _compiled.pop(key, None)
            pending.set_exception(e)
    return pending.result()


def compile_config(problem: GemmProblem, config: Mapping[str, Value], arch: str) -> Artifact:
    """Compile one configuration to a cubin for `arch` ("sm_80", "sm_90", ...). Needs no GPU. Raises CompileFailed."""
    source = gemm_source(problem, config)
    t0 = time.perf_counter()
    try:
        program = _compile_once(source, arch)
    except nvrtc.NvrtcError as e:
        log = e.log.strip().splitlines()
        raise CompileFailed(f"{e}: " + "\n".join(log[-20:])) from None
    elapsed = time.perf_counter() - t0
    main = program.resources.get(MAIN_KERNEL)
    if main is None:
        raise CompileFailed(f"the cubin has no entry {MAIN_KERNEL!r}; ptxas reported {sorted(program.resources)}")
    launch = launch_description(problem, config)
    resources = {
        "registers": main.registers,
        "static_shared_bytes": main.shared_bytes,
        "dynamic_shared_bytes": tiling(problem, config).smem_bytes,
        "stack_bytes": main.stack_bytes,
        "spill_store_bytes": main.spill_store_bytes,
        "spill_load_bytes": main.spill_load_bytes,
        "kernels": {name: dict(r.__dict__) for name, r in program.resources.items()},
        "arch": arch,
        "nvrtc_version": program.nvrtc_version,
        "ptx_isa": program.ptx_isa,
    }
    return Artifact(config=dict(config), kernel_name=MAIN_KERNEL, binary=program.cubin, source=source, launch=launch,
                    resources=resources, compile_s=elapsed)


# ---- running -----------------------------------------------------------------------------------------------------

def _cupy():
    try:
        import cupy
    except ImportError:
        raise ToolchainMissing("CuPy is not installed, so CUDA kernels cannot run here.", _CUPY_HINT) from None
    return cupy


class L2Flush:
    """Overwrites a buffer of twice the current device's L2 size (64 MiB assumed where CuPy reports none), so that no
    sample finds its inputs in the cache (outside the timing)."""

    def __init__(self) -> None:
        cupy = _cupy()
        l2_bytes = int(cupy.cuda.Device().attributes.get("L2CacheSize", 0)) or 64 << 20
        self._buffer = cupy.empty(2 * l2_bytes // 4, dtype=cupy.int32)

    def __call__(self) -> None:
        self._buffer.fill(0)


@dataclass
class DeviceOperands:
    """A problem's operands in device memory, in storage format (bf16 as uint16 bit patterns)."""

    problem: GemmProblem
    a: Any
    b: Any
    c: Any
    bias: Any
    residual: Any
    workspace: Any

    @property
    def leading_dims(self) -> tuple[int, int, int]:
        p = self.problem
        return p.k, (p.n if p.layout == "nn" else p.k), p.n

    def poison(self) -> None:
        """Fill C with NaN, so that any element a kernel fails to write fails the check."""
        if self.problem.dtype == "bf16":
            self.c.fill(0x7FC0)
        else:
            self.c.fill(np.nan)

    def output(self) -> Any:
        """C as float64 values, on the device."""
        return from_storage(self.c, self.problem.dtype)


def upload(problem: GemmProblem, inputs: GemmInputs, *, workspace_bytes: int = 0) -> DeviceOperands:
    """Operands in storage format on the current device (inputs made on the host are copied there)."""
    cupy = _cupy()

    def put(values: Any):
        return None if values is None else cupy.asarray(to_storage(values, problem.dtype))

    storage = to_storage(np.zeros(1), problem.dtype).dtype
    return DeviceOperands(
        problem=problem,
        a=put(inputs.a),
        b=put(inputs.b),
        c=cupy.empty((problem.m, problem.n), dtype=storage),
        bias=put(inputs.bias),
        residual=put(inputs.residual),
        workspace=cupy.empty(workspace_bytes // 4, dtype=cupy.float32) if workspace_bytes else None,
    )


class LoadedGemm:
    """A cubin loaded on the current device, launched by following its launch description."""

    def __init__(self, artifact: Artifact) -> None:
        cupy = _cupy()
        from cupy.cuda import driver
        from cupy.cuda import function as cuda_function

        self._cupy = cupy
        self.launch = artifact.launch
        self._module = cuda_function.Module()
        self._module.load(bytes(artifact.binary or b""))
        self._functions = {}
        for step in self.launch["steps"]:
            if step["kind"] != "kernel":
                continue
            fn = self._module.get_function(step["name"])
            if step["dynamic_smem_bytes"] > 48 * 1024:
                attr = getattr(driver, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 8)
                driver.funcSetAttribute(fn.ptr, attr, int(step["dynamic_smem_bytes"]))
            self._functions[step["name"]] = fn

    def workspace_bytes(self, problem: GemmProblem) -> int:
        return int(self.launch.get("workspace_bytes_per_mn", 0)) * problem.m * problem.n

    def __call__(self, ops: DeviceOperands, stream: Any = None) -> None:
        """Enqueue the whole launch sequence (memsets included) on `stream`."""
        cupy = self._cupy
        p = ops.problem
        stream = stream if stream is not None else cupy.cuda.get_current_stream()
        lda, ldb, ldc = ops.leading_dims

        def ptr(x: Any) -> Any:
            return x if x is not None else np.uint64(0)

        args = (ops.a, ops.b, ops.c, ptr(ops.bias), ptr(ops.residual), ptr(ops.workspace),
                np.int32(p.m), np.int32(p.n), np.int32(p.k), np.int32(lda), np.int32(ldb), np.int32(ldc))
        for step in self.launch["steps"]:
            if step["kind"] == "memset":
                nbytes = p.m * p.n * int(step["elem_bytes"])
                cupy.cuda.runtime.memsetAsync(ops.workspace.data.ptr, 0, nbytes, stream.ptr)
                continue
            grid = tuple(grid_extent(step["grid"][axis], self.launch, p.m, p.n, p.k) for axis in ("x", "y", "z"))
            self._functions[step["name"]](grid, tuple(step["block"]), args,
                                          shared_mem=int(step["dynamic_smem_bytes"]), stream=stream)


def checked_inputs(problem: GemmProblem, seed: int) -> tuple[GemmInputs, Any]:
    """Fresh random inputs for `seed`, made on the current GPU, and their float64 reference there (cuBLAS DGEMM):
    a check costs milliseconds even at 8192³, where numpy's float64 reference takes seconds."""
    inputs = make_inputs(problem, _cupy().random.RandomState(seed))
    return inputs, reference(problem, inputs)


def _failure(status: Status, error: BaseException | str, compile_s: float = 0.0) -> Evaluation:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return Evaluation(status, reason=text.strip()[:500], compile_s=compile_s)


def _verify_and_time(run: Callable[[], None], ops: DeviceOperands, ref: np.ndarray, *, policy: TimingPolicy | None,
                     compile_s: float = 0.0) -> Evaluation:
    """Poison, run once, check; only a correct result is timed. `policy=None` checks without timing."""
    cupy = _cupy()
    try:
        ops.poison()
        run()
        cupy.cuda.get_current_stream().synchronize()
        out = ops.output()
    except Exception as e:  # an illegal address, too many resources, ...: the kernel's fault, not ours
        return _failure(Status.LAUNCH_ERROR, e, compile_s)
    verdict = check(out, ref, ops.problem.dtype)
    if not verdict.ok:
        return Evaluation(Status.WRONG_RESULT, reason=verdict.reason, rel_error=verdict.rel_error, compile_s=compile_s)
    if policy is None:
        return Evaluation(Status.OK, rel_error=verdict.rel_error, compile_s=compile_s)
    from tracea_cli.backends.cuda_clock import CudaEventClock

    try:
        samples: Samples = measure(run, clock=CudaEventClock(), policy=policy, prepare=L2Flush())
    except Exception as e:
        return _failure(Status.LAUNCH_ERROR, e, compile_s)
    return Evaluation(Status.OK, samples=samples, rel_error=verdict.rel_error, compile_s=compile_s)


def run_checked(problem: GemmProblem, target: Target,
                launcher: Callable[[GemmInputs], tuple[DeviceOperands, Callable[[], None]]], *, seed: int,
                policy: TimingPolicy | None, compile_s: float = 0.0) -> Evaluation:
    """On the target's GPU: fresh inputs for `seed` and their reference; `launcher(inputs)` puts them in device memory
    and gives (operands, launch); the launch is checked, and (with a policy) timed only when its result is right.
    A failure to load or launch is a LAUNCH_ERROR evaluation."""
    cupy = _cupy()
    try:
        with cupy.cuda.Device(target.device_index or 0):
            inputs, ref = checked_inputs(problem, seed)
            ops, run = launcher(inputs)
            return _verify_and_time(run, ops, ref, policy=policy, compile_s=compile_s)
    except Exception as e:
        return _failure(Status.LAUNCH_ERROR, e, compile_s)


def run_artifact(artifact: Artifact, problem: GemmProblem, target: Target, *, seed: int,
                 policy: TimingPolicy | None) -> Evaluation:
    """Load, check against the float64 reference, and (with a policy) time one compiled configuration."""

    def launcher(inputs: GemmInputs) -> tuple[DeviceOperands, Callable[[], None]]:
        kernel = LoadedGemm(artifact)
        ops = upload(problem, inputs, workspace_bytes=kernel.workspace_bytes(problem))
        return ops, lambda: kernel(ops)

    return run_checked(problem, target, launcher, seed=seed, policy=policy, compile_s=artifact.compile_s)


# ---- the vendor baseline -----------------------------------------------------------------------------------------

def _cublas_view(cupy: Any, array: Any, dtype: str) -> Any:
    """The array as cuBLAS should see it: bf16 bit patterns as ml_dtypes' bfloat16 (unchanged without ml_dtypes)."""
    if dtype != "bf16" or array is None:
        return array
    try:
        import ml_dtypes

        return array.view(np.dtype(ml_dtypes.bfloat16))
    except Exception:  # no ml_dtypes, or a CuPy without bfloat16: cupy.matmul will refuse, and torch is tried
        return array


_EPILOGUE_CODE = {
    "bias": "v = v;",
    "bias_relu": "v = v > 0.f ? v : 0.f;",
    "bias_silu": "v = v / (1.f + expf(-v));",
    "bias_gelu": "v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));",
    "bias_residual": "v = v + (float)r;",
}


@functools.lru_cache(maxsize=None)
def _epilogue_pass(epilogue: str):
    """An unfused epilogue pass over C (what a library user writes after cuBLAS), computed in fp32."""
    cupy = _cupy()
    residual = epilogue == "bias_residual"
    return cupy.ElementwiseKernel(
        "T bias" + (", T r" if residual else ""), "T c",
        f"float v = (float)c + (float)bias; {_EPILOGUE_CODE[epilogue]} c = (T)v;",
        f"tracea_epilogue_{epilogue}")


def cublas_runner(problem: GemmProblem, ops: DeviceOperands) -> tuple[str, Callable[[], None]]:
    """(name, run): C = epilogue(A·B) with cupy.matmul (cuBLAS), then the epilogue as a separate pass when there is
    one. bf16 needs ml_dtypes for CuPy; without it, cuBLAS is reached through torch when that is installed. tf32 runs
    on TF32 tensor cores only inside `cublas_math(problem)`."""
    cupy = _cupy()
    name = baseline_name(problem)
    a, b, c, bias, res = (_cublas_view(cupy, x, problem.dtype) for x in (ops.a, ops.b, ops.c, ops.bias, ops.residual))
    b_kn = b if problem.layout == "nn" else b.T
    if problem.epilogue == "none":
        if problem.dtype == "bf16":  # CuPy's bf16 support varies by version: try once, else go through torch
            try:
                if a.dtype.name != "bfloat16":
                    raise TypeError("no bfloat16 dtype for CuPy")
                cupy.matmul(a, b_kn, out=c)
                cupy.cuda.get_current_stream().synchronize()
            except Exception:
                return f"{name} (via torch)", _torch_bf16_runner(problem, ops)
        return name, lambda: cupy.matmul(a, b_kn, out=c)
    if problem.dtype == "bf16" and a.dtype.name != "bfloat16":
        raise ToolchainMissing("the bf16 epilogue baseline needs CuPy with ml_dtypes' bfloat16.", "pip install ml_dtypes")
    epilogue = _epilogue_pass(problem.epilogue)
    extra = (res,) if problem.has_residual else ()

    def run() -> None:
        cupy.matmul(a, b_kn, out=c)
        epilogue(bias, *extra, c)

    return name, run


def _torch_bf16_runner(problem: GemmProblem, ops: DeviceOperands) -> Callable[[], None]:
    try:
        import torch
    except ImportError:
        raise ToolchainMissing("a bf16 cuBLAS baseline needs ml_dtypes (for CuPy) or torch.", "pip install ml_dtypes") from None

    def bf16(x: Any) -> Any:  # shares the CuPy buffer (DLPack), on the same default stream
        return torch.from_dlpack(x).view(torch.bfloat16)

    a, b, c = bf16(ops.a), bf16(ops.b), bf16(ops.c)
    b_kn = b if problem.layout == "nn" else b.t()
    return lambda: torch.matmul(a, b_kn, out=c)


@contextlib.contextmanager
def cublas_math(problem: GemmProblem) -> Iterator[None]:
    """The math `cublas_runner`'s run needs, inside the block: for a tf32 problem, cuBLAS fp32 GEMMs on TF32 tensor
    cores (CuPy's compute type; the previous one restored after). Other dtypes: nothing changes."""
    if problem.dtype != "tf32":
        yield
        return
    from cupy._core import _routines_linalg as linalg

    previous = linalg.get_compute_type(np.float32)
    linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_TF32)
    try:
        yield
    finally:
        linalg.set_compute_type(np.float32, previous)


def baseline_name(problem: GemmProblem) -> str:
    name = "cublas-tf32" if problem.dtype == "tf32" else "cublas"
    return name if problem.epilogue == "none" else f"{name}+epilogue-pass"


# ---- the backend -------------------------------------------------------------------------------------------------

def device_target(index: int = 0) -> Target:
    """The Target of CUDA device `index` as this process sees it, limits read from the runtime."""
    cupy = _cupy()
    rt = cupy.cuda.runtime

    def attr(name: str, number: int) -> int:
        return int(rt.deviceGetAttribute(getattr(rt, name, number), index))

    major, minor = attr("cudaDevAttrComputeCapabilityMajor", 75), attr("cudaDevAttrComputeCapabilityMinor", 76)
    sm_count = attr("cudaDevAttrMultiProcessorCount", 16)
    limits = DeviceLimits(
        arch=f"sm_{major}{minor}",
        compute_capability=(major, minor),
        max_threads_per_block=attr("cudaDevAttrMaxThreadsPerBlock", 1),
        max_threads_per_sm=attr("cudaDevAttrMaxThreadsPerMultiProcessor", 39),
        max_shared_per_block=attr("cudaDevAttrMaxSharedMemoryPerBlock", 8),
        max_shared_per_block_optin=attr("cudaDevAttrMaxSharedMemoryPerBlockOptin", 97),
        max_shared_per_sm=attr("cudaDevAttrMaxSharedMemoryPerMultiprocessor", 81),
        registers_per_sm=attr("cudaDevAttrMaxRegistersPerMultiprocessor", 82),
        registers_per_block=attr("cudaDevAttrMaxRegistersPerBlock", 12),
        warp_size=attr("cudaDevAttrWarpSize", 10),
        sm_count=sm_count,
        l2_bytes=attr("cudaDevAttrL2CacheSize", 38),
    )
    name = rt.getDeviceProperties(index)["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    return Target(backend="cuda", device_class=f"{name} sm_{major}{minor} {sm_count}SM", arch=limits.arch,
                  limits=limits, device_index=index)


class CudaBackend:
    """backends.base.Backend for GEMM on NVIDIA GPUs: SIMT (fp32, fp64) and mma.sync (fp16, bf16, tf32) families."""

    name = "cuda"

    def space(self, problem: GemmProblem, target: Target):
        return gemm_space(problem, target)

    def source_hash(self, problem: GemmProblem) -> str:
        from tracea_cli.ops.gemm.cuda_space import FAMILY

        return source_digest(f"generator {GENERATOR_VERSION}\n{_template(FAMILY[problem.dtype])}")

    def compile(self, problem: GemmProblem, config: Mapping[str, Value], target: Target) -> Artifact:
        reason = gemm_space(problem, target).why_invalid(config)
        if reason:
            raise UsageError(f"the configuration is not in the {problem.dtype} CUDA space: {reason}.",
                             "Check the configuration against `tracea tune`'s space.")
        if target.arch is None:
            raise UsageError("a CUDA target needs an architecture (sm_80, sm_90, ...).")
        return compile_config(problem, config, target.arch)

    def evaluate(self, artifact: Artifact, problem: GemmProblem, target: Target, *, policy: TimingPolicy,
                 seed: int) -> Evaluation:
        return run_artifact(artifact, problem, target, seed=seed, policy=policy)

    def check(self, artifact: Artifact, problem: GemmProblem, target: Target, *, seed: int) -> Evaluation:
        """Correctness only: fresh inputs, poisoned output, the reference; no timing."""
        return run_artifact(artifact, problem, target, seed=seed, policy=None)

    def baseline(self, problem: GemmProblem, target: Target, *, policy: TimingPolicy,
                 seed: int) -> tuple[str, Evaluation]:
        cupy = _cupy()
        name = baseline_name(problem)
        try:
            with cupy.cuda.Device(target.device_index or 0):
                inputs, ref = checked_inputs(problem, seed)
                ops = upload(problem, inputs)
                name, run = cublas_runner(problem, ops)
                with cublas_math(problem):
                    return name, _verify_and_time(run, ops, ref, policy=policy)
        except ToolchainMissing as e:
            return name, _failure(Status.LAUNCH_ERROR, str(e))
        except Exception as e:
            return name, _failure(Status.LAUNCH_ERROR, e)


__all__ = [
    "CudaBackend", "DeviceOperands", "L2Flush", "LoadedGemm", "baseline_name", "checked_inputs",
    "compile_config", "cublas_math", "cublas_runner", "device_target", "gemm_source", "grid_extent",
    "launch_description", "run_artifact", "run_checked", "upload",
]
