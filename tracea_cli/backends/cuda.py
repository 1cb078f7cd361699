"""The CUDA runtime: any family's source compiled by NVRTC to a cubin (no GPU needed), loaded and launched by following
its launch plan (ops/launch.py), with CuPy owning the memory, the stream and the events. It knows no op.

    compile_artifact(family, source, plan, config, arch)  NVRTC, once per process per program; ptxas report kept
    load(artifact)                    the cubin in the current device's primary context (once per process and device)
    bind(module, plan, values)        a launcher: workspace and scratch placed, tensor maps encoded, arguments packed
                                      once; each call runs the plan's steps in order on the current stream
    evaluate(...)                     fresh inputs, check, then time (backends/checked.py) on the target's GPU

Every kernel goes through cuda.bindings (`cuLaunchKernel`, or `cuLaunchKernelEx` for a launch-time cluster): one
launcher for ordinary launches, clusters and TMA tensor-map arguments. CuPy and cuda.bindings are imported inside
functions only: importing this module stays cheap and works without a GPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tracea_cli.backends import nvrtc
from tracea_cli.backends.base import (
    Artifact,
    CompileFailed,
    Evaluation,
    Status,
    failure,
)
from tracea_cli.backends.checked import Device, run_checked
from tracea_cli.errors import ToolchainMissing
from tracea_cli.ops.launch import KernelStep, LaunchPlan, MemsetStep, TensorMap
from tracea_cli.space import Value
from tracea_cli.target import DeviceLimits, Target
from tracea_cli.timing import TimingPolicy

_CUPY_HINT = "Install the CUDA extra (pip install 'tracea[cuda]') on a machine with an NVIDIA GPU."
DEFAULT_SMEM_LIMIT = 48 * 1024  # above this a kernel's dynamic shared memory limit must be raised
SERIALIZED_WGMMA = "C7510"  # ptxas: a wgmma pipeline was serialised (correct, but slow)
IGNORED_SETMAXNREG = "C7508"  # ptxas: setmaxnreg was ignored


def _cupy():
    try:
        import cupy
    except ImportError:
        raise ToolchainMissing("CuPy is not installed, so CUDA kernels cannot run here.", _CUPY_HINT) from None
    return cupy


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:  # cuda-python before the cuda.bindings namespace
        from cuda import cuda as driver  # type: ignore[no-redef]
    return driver


class LaunchFailed(RuntimeError):
    """A driver call for loading or launching failed; the message names the call and the CUDA error."""


def _ok(result: Any, what: str) -> Any:
    driver = _driver()
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise LaunchFailed(f"{what} failed: {getattr(err, 'name', str(err))}")
    return rest[0] if len(rest) == 1 else rest


_raw_launch_fn: list[Any] = []


def _raw_launch() -> Any:
    """libcuda's cuLaunchKernel through ctypes, or None where it cannot be had. cuda.bindings' wrapper of it costs
    about 16 µs of host time per call on the H200's host against 5 µs for this (benchmarks/conv_call_parts.py),
    which a small kernel called from a model's forward pass feels."""
    if not _raw_launch_fn:
        try:
            fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        except (OSError, AttributeError):
            fn = None
        _raw_launch_fn.append(fn)
    return _raw_launch_fn[0]


def _ok_code(code: int, what: str) -> None:
    """_ok for a driver call made through ctypes (its CUresult as a plain int)."""
    if code:
        driver = _driver()
        try:
            name = driver.CUresult(code).name
        except ValueError:
            name = f"CUresult {code}"
        raise LaunchFailed(f"{what} failed: {name}")


# ---- compiling (no GPU) -----------------------------------------------------------------------------------------------

_COMPILED_KEEP = 256  # programs kept per process
_compiled: dict[tuple[str, str], Future] = {}  # (source digest, arch) -> the one compile of that program
_compiled_lock = threading.Lock()
_retry_lock = threading.Lock()


def _compile_program(source: str, arch: str, kernels: tuple[str, ...]) -> nvrtc.CompiledProgram:
    program = nvrtc.compile_source(source, nvrtc.CompileOptions(arch=arch), name="tracea_kernel.cu", want_ptx=True)
    if not set(kernels) <= set(program.resources):  # no ptxas report: once more, alone (see docs/engine.md)
        with _retry_lock:
            program = nvrtc.compile_source(source, nvrtc.CompileOptions(arch=arch), name="tracea_kernel.cu", want_ptx=True)
    return program


def compile_program(source: str, arch: str, kernels: tuple[str, ...] = ()) -> nvrtc.CompiledProgram:
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
            pending.set_result(_compile_program(source, arch, kernels))
        except BaseException as e:  # not kept: a later call compiles afresh
            with _compiled_lock:
                _compiled.pop(key, None)
            pending.set_exception(e)
    return pending.result()


def _ptx_target(ptx: str) -> str:
    m = re.search(r"^\.target\s+(\S+)", ptx, re.M)
    return m.group(1) if m else ""


def compile_artifact(family: str, source: str, plan: LaunchPlan, config: Mapping[str, Value], arch: str) -> Artifact:
    """One configuration's cubin for `arch` ("sm_80", "sm_90a"). Needs no GPU. Raises CompileFailed."""
    kernels = tuple(k.name for k in plan.kernels)
    t0 = time.perf_counter()
    try:
        program = compile_program(source, arch, kernels)
    except nvrtc.NvrtcError as e:
        log = e.log.strip().splitlines()
        raise CompileFailed(f"{e}: " + "\n".join(log[-20:])) from None
    missing = [k for k in kernels if k not in program.resources]
    if missing:
        raise CompileFailed(f"the cubin has no entries {missing}; ptxas reported {sorted(program.resources)}")
    main = program.resources[plan.main_kernel.name]
    resources = {
        "registers": main.registers,
        "static_shared_bytes": main.shared_bytes,
        "dynamic_shared_bytes": max(k.dynamic_smem_bytes for k in plan.kernels),
        "stack_bytes": main.stack_bytes,
        "spill_store_bytes": main.spill_store_bytes,
        "spill_load_bytes": main.spill_load_bytes,
        "kernels": {name: dict(r.__dict__) for name, r in program.resources.items()},
        "arch": arch,
        "nvrtc_version": program.nvrtc_version,
        "ptx_isa": program.ptx_isa,
        "ptx_target": _ptx_target(program.ptx),
        "warnings": list(program.warnings),
        "log": program.log,
    }
    return Artifact(config=dict(config), family=family, source=source, plan=plan, binary=program.cubin, arch=arch,
                    resources=resources, compile_s=time.perf_counter() - t0)


# ---- devices ----------------------------------------------------------------------------------------------------------

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


def runs_on(arch: str, compute_capability: tuple[int, int]) -> str | None:
    """None if a cubin for `arch` runs on a device of `compute_capability`, else why not: same major version and a
    minor at most the device's; an architecture-specific one ("sm_90a") on exactly its own."""
    m = re.fullmatch(r"sm_(\d+)(\d)(a?)", arch)
    if not m:
        return f"{arch!r} is not a CUDA architecture"
    major, minor = int(m.group(1)), int(m.group(2))
    cc = f"{compute_capability[0]}.{compute_capability[1]}"
    if m.group(3) and (major, minor) != tuple(compute_capability):
        return f"this GPU is compute capability {cc}; a {arch} kernel runs on {major}.{minor} only"
    if major != compute_capability[0] or minor > compute_capability[1]:
        return f"this GPU is compute capability {cc}; a {arch} cubin does not run on it"
    return None


class L2Flush:
    """Overwrites a buffer of twice the current device's L2 size (64 MiB assumed where CuPy reports none), so that no
    sample finds its inputs in the cache (outside the timing)."""

    def __init__(self) -> None:
        cupy = _cupy()
        l2_bytes = int(cupy.cuda.Device().attributes.get("L2CacheSize", 0)) or 64 << 20
        self._buffer = cupy.empty(2 * l2_bytes // 4, dtype=cupy.int32)

    def __call__(self) -> None:
        self._buffer.fill(0)


def gpu_device() -> Device:
    """The check-then-time path's view of the current GPU: CuPy arrays, CUDA events holding the stream, L2 flushed."""
    cupy = _cupy()
    from tracea_cli.backends.cuda_clock import CudaEventClock

    def clock(stream: int | None):
        return CudaEventClock(None if stream is None else cupy.cuda.ExternalStream(stream))

    return Device(xp=cupy, rng=cupy.random.RandomState, synchronize=lambda: cupy.cuda.get_current_stream().synchronize(),
                  clock=clock, prepare=L2Flush())


# ---- loading and launching ----------------------------------------------------------------------------------------------

# tf32 operands load through TFLOAT32 maps (wgmma reads them so: relative error 2.6e-4 on the H200, against 6.9e-4
# through FLOAT32 maps, where wgmma truncates); a tf32 problem's C is plain fp32.
_MAP_DTYPE = {"fp16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", "bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
              "tf32": "CU_TENSOR_MAP_DATA_TYPE_TFLOAT32", "fp32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"}
_SWIZZLE = {"none": "CU_TENSOR_MAP_SWIZZLE_NONE", "32B": "CU_TENSOR_MAP_SWIZZLE_32B",
            "64B": "CU_TENSOR_MAP_SWIZZLE_64B", "128B": "CU_TENSOR_MAP_SWIZZLE_128B"}
_L2_PROMOTION = {"none": "CU_TENSOR_MAP_L2_PROMOTION_NONE", "64B": "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
                 "128B": "CU_TENSOR_MAP_L2_PROMOTION_L2_128B", "256B": "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"}


ENCODED_MAPS_KEPT = 64  # tensor maps a pointer writer keeps encoded, by map and address, before it starts afresh


def encode_tensor_map(ptr: int, spec: TensorMap, sizes: Mapping[str, int]) -> bytes:
    """The 128-byte CUtensorMap of a 2-D tiled `spec` over memory at `ptr` ("zero" out-of-bounds fill: the driver's
    FILL_NONE)."""
    dims = [int(sizes[name]) for name in spec.dims]
    return encode_tiled(ptr, spec.dtype, dims, [int(sizes[spec.row_stride]) * spec.elem_bytes], spec.box,
                        spec.swizzle, spec.l2_promotion, what=f"cuTensorMapEncodeTiled({spec.tensor})")


def encode_map(ptr: int, spec: TensorMap, sizes: Mapping[str, int]) -> bytes:
    """The 128-byte CUtensorMap of `spec` (any kind, docs/kernel-abi.md "Tensor maps") over memory at `ptr`, its sizes
    and strides read from `sizes` by name: the one encoder `bind`, `repoint` and `pointer_writer` call."""
    if spec.kind == "tiled":
        return encode_tensor_map(ptr, spec, sizes)
    dims = [int(sizes[name]) for name in spec.dims]
    strides_bytes = [int(sizes[name]) * spec.elem_bytes for name in spec.strides]
    if spec.kind == "tiled3d":
        return encode_tiled(ptr, spec.dtype, dims, strides_bytes, spec.box, spec.swizzle, spec.l2_promotion)
    if spec.kind == "im2col":
        return encode_im2col(ptr, spec.dtype, dims, strides_bytes, spec.lower, spec.upper, spec.channels_per_pixel,
                             spec.pixels_per_column, spec.element_strides, spec.swizzle, spec.l2_promotion)
    raise LaunchFailed(f"the tensor map over {spec.tensor} is of kind {spec.kind!r}, which this runtime cannot encode")


def encode_tiled(ptr: int, dtype: str, dims: Sequence[int], strides_bytes: Sequence[int], box: Sequence[int],
                 swizzle: str = "128B", l2_promotion: str = "256B", what: str = "cuTensorMapEncodeTiled") -> bytes:
    """The 128-byte CUtensorMap of a tiled map of any rank (sizes and box innermost first; rank - 1 strides in bytes;
    zeros out of bounds)."""
    d = _driver()
    tmap = _ok(d.cuTensorMapEncodeTiled(
        getattr(d.CUtensorMapDataType, _MAP_DTYPE[dtype]), len(dims), ptr,
        [d.cuuint64_t(int(v)) for v in dims], [d.cuuint64_t(int(v)) for v in strides_bytes],
        [d.cuuint32_t(int(v)) for v in box], [d.cuuint32_t(1)] * len(dims),
        d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, getattr(d.CUtensorMapSwizzle, _SWIZZLE[swizzle]),
        getattr(d.CUtensorMapL2promotion, _L2_PROMOTION[l2_promotion]),
        d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    ), what)
    return ctypes.string_at(int(tmap.getPtr()), 128)


def encode_im2col(ptr: int, dtype: str, dims: Sequence[int], strides_bytes: Sequence[int], lower: Sequence[int],
                  upper: Sequence[int], channels_per_pixel: int, pixels_per_column: int,
                  element_strides: Sequence[int], swizzle: str = "128B", l2_promotion: str = "256B") -> bytes:
    """The 128-byte CUtensorMap of an im2col map (cuTensorMapEncodeIm2col; sizes innermost first, the corners in the
    same order over the spatial dimensions; zeros out of bounds)."""
    d = _driver()
    tmap = _ok(d.cuTensorMapEncodeIm2col(
        getattr(d.CUtensorMapDataType, _MAP_DTYPE[dtype]), len(dims), ptr,
        [d.cuuint64_t(int(v)) for v in dims], [d.cuuint64_t(int(v)) for v in strides_bytes],
        [int(v) for v in lower], [int(v) for v in upper], channels_per_pixel, pixels_per_column,
        [d.cuuint32_t(int(v)) for v in element_strides],
        d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, getattr(d.CUtensorMapSwizzle, _SWIZZLE[swizzle]),
        getattr(d.CUtensorMapL2promotion, _L2_PROMOTION[l2_promotion]),
        d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    ), "cuTensorMapEncodeIm2col")
    return ctypes.string_at(int(tmap.getPtr()), 128)


def _launch_config(step: KernelStep, grid: tuple[int, int, int], stream_ptr: int):
    d = _driver()
    cfg = d.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = step.block
    cfg.sharedMemBytes = step.dynamic_smem_bytes
    cfg.hStream = d.CUstream(stream_ptr)
    if step.cluster is not None and step.cluster != (1, 1, 1):
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = step.cluster
        cfg.attrs = [attr]
        cfg.numAttrs = 1
    else:
        cfg.numAttrs = 0
    return cfg


@dataclass
class LoadedModule:
    """A cubin loaded into the current device's context: its kernels, their shared-memory limits raised, and for
    kernels on a persistent grid the clusters (or CTAs) that fit on the device at once."""

    artifact: Artifact
    module: Any
    functions: dict[str, Any]
    resident: dict[str, int]


def _resident(function: Any, step: KernelStep, sm_count: int) -> int:
    d = _driver()
    cluster = step.cluster[0] if step.cluster else 1
    if cluster > 1:
        n = int(_ok(d.cuOccupancyMaxActiveClusters(function, _launch_config(step, (sm_count * cluster, 1, 1), 0)),
                    "cuOccupancyMaxActiveClusters"))
    else:
        per_sm = _ok(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, step.block[0], step.dynamic_smem_bytes),
                     "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        n = int(per_sm) * sm_count
    if n < 1:
        raise LaunchFailed(f"{step.name} does not fit on this device (no resident cluster)")
    return n


_LOADED: dict[tuple[str, int, tuple], LoadedModule] = {}  # (cubin digest, device, kernels' launch shapes)
_loaded_lock = threading.Lock()


def load(artifact: Artifact) -> LoadedModule:
    """The artifact's cubin in the current device's primary context, loaded once per process and device. Several
    artifacts can share one cubin (a family whose geometry is all in its arguments and tensor maps: conv2d's im2col
    kernel serves every stride and padding with one source), so the module is shared but the LoadedModule returned
    carries the caller's artifact: `bind` reads the plan (its tensor maps) from it, never from the first artifact
    that loaded the cubin."""
    cupy = _cupy()
    device = cupy.cuda.Device()
    launch_shapes = tuple((s.name, s.block, s.dynamic_smem_bytes, s.cluster) for s in artifact.plan.kernels)
    key = (hashlib.sha256(artifact.binary or b"").hexdigest(), device.id, launch_shapes)
    with _loaded_lock:
        cached = _LOADED.get(key)
        if cached is not None:
            return cached if cached.artifact is artifact else replace(cached, artifact=artifact)
        d = _driver()
        device.use()
        cupy.cuda.runtime.free(0)  # makes sure the primary context exists and is current
        module = _ok(d.cuModuleLoadData(artifact.binary), "cuModuleLoadData")
        sm_count = int(device.attributes["MultiProcessorCount"])
        functions, resident = {}, {}
        for step in artifact.plan.kernels:
            fn = _ok(d.cuModuleGetFunction(module, step.name.encode()), f"cuModuleGetFunction({step.name})")
            if step.dynamic_smem_bytes > DEFAULT_SMEM_LIMIT:
                _ok(d.cuFuncSetAttribute(fn, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         step.dynamic_smem_bytes), f"cuFuncSetAttribute({step.name})")
            functions[step.name] = fn
            if "persistent_clusters" in step.grid:
                resident[step.name] = _resident(fn, step, sm_count)
        loaded = _LOADED[key] = LoadedModule(artifact, module, functions, resident)
        return loaded


def _pointer(value: Any) -> int:
    """A device pointer from a CuPy array, an integer address or None (a null pointer for an absent tensor)."""
    if value is None:
        return 0
    if isinstance(value, (int, np.integer)):
        return int(value)
    return int(value.data.ptr)


class BoundLaunch:
    """A launcher of one loaded plan over one set of values: calling it queues every step in order. `repoint` moves
    it to other tensors (same sizes) in place: the packed pointer arguments are rewritten, and the tensor maps over a
    moved tensor encoded again, instead of binding afresh."""

    def __init__(self, queued: list[Callable[[], None]], keep: list[Any], pointers: dict[str, list[Any]],
                 maps: dict[str, list[Any]], plan: LaunchPlan, sizes: Mapping[str, int]) -> None:
        self._queued, self._keep, self._pointers, self._maps = queued, keep, pointers, maps
        self._plan, self._sizes = plan, sizes

    def __call__(self) -> None:
        for run in self._queued:
            run()

    def pointer_writer(self, names: tuple[str, ...]) -> Callable[[tuple[int, ...]], None]:
        """A function that points the launch's `names` (in that order) at new addresses: for calls that repeat with
        the same sizes. It writes the packed pointer slots, and for a tensor that a TMA tensor map reads, that map
        encoded for the new address; encodings are remembered per map and address (a layer called again and again
        sees few addresses: torch's and CuPy's allocators hand the same blocks back), so a repeated address costs a
        128-byte copy instead of an encode."""
        slots = tuple(tuple(self._pointers.get(name, ())) for name in names)
        maps = tuple(tuple((map_name, spec, self._maps[map_name]) for map_name, spec in self._plan.tensor_maps.items()
                           if spec.tensor == name and map_name in self._maps) for name in names)
        encoded: dict[tuple[str, int], bytes] = {}
        sizes = self._sizes

        def write(addresses: tuple[int, ...]) -> None:
            for group, mapped, address in zip(slots, maps, addresses):
                for slot in group:
                    slot.value = address
                for map_name, spec, buffers in mapped:
                    data = encoded.get((map_name, address))
                    if data is None:
                        if len(encoded) >= ENCODED_MAPS_KEPT:
                            encoded.clear()
                        data = encoded[(map_name, address)] = encode_map(address, spec, sizes)
                    for buffer in buffers:
                        ctypes.memmove(buffer, data, len(data))

        return write

    def repoint(self, pointers: Mapping[str, int]) -> None:
        """Use these device pointers (by tensor name) from now on."""
        for name, ptr in pointers.items():
            for slot in self._pointers.get(name, ()):
                slot.value = ptr
            for map_name, spec in self._plan.tensor_maps.items():
                if spec.tensor == name and map_name in self._maps:
                    encoded = encode_map(ptr, spec, self._sizes)
                    for buffer in self._maps[map_name]:
                        ctypes.memmove(buffer, encoded, len(encoded))


def bind(loaded: LoadedModule, values: Mapping[str, Any], stream_ptr: int | None = None) -> BoundLaunch:
    """A launcher of the loaded plan over `values` (the family's `args`: arrays by tensor name, sizes by parameter
    name). The workspace (split-K sums, then the staging scratch) is allocated here and lives with the launcher (it
    is this launcher's alone, so a memset step marked `once` zeroes it here and never per call);
    tensor maps are encoded and every step's arguments packed once; each call queues the steps in order."""
    cupy = _cupy()
    d = _driver()
    plan = loaded.artifact.plan
    stream_ptr = cupy.cuda.get_current_stream().ptr if stream_ptr is None else stream_ptr
    named: dict[str, Any] = dict(values)
    sizes = {k: int(v) for k, v in named.items() if isinstance(v, (int, np.integer)) and not isinstance(v, bool)}
    unmet = plan.unmet(sizes)
    if unmet is not None:  # the tensor maps would read the wrong memory
        raise LaunchFailed(f"the plan's tensor maps need {unmet.value} = {' x '.join(unmet.of)}, which these "
                           "arguments break")
    placed, total = plan.scratch_layout(sizes)
    workspace = cupy.empty(total, dtype=np.uint8) if total else None
    named["workspace"] = workspace
    for buf in placed:
        named[buf.name] = _pointer(workspace) + buf.offset
        sizes[buf.ld_name] = named[buf.ld_name] = buf.ld
    maps = {name: encode_map(_pointer(named[spec.tensor]), spec, sizes) for name, spec in plan.tensor_maps.items()}
    keep: list[Any] = [workspace]
    queued: list[Callable[[], None]] = []
    pointer_slots: dict[str, list[Any]] = {}
    map_buffers: dict[str, list[Any]] = {}
    stream = d.CUstream(stream_ptr)
    for step in plan.steps:
        if isinstance(step, MemsetStep):
            nbytes = sizes["M"] * sizes["N"] * step.elem_bytes
            ptr = _pointer(workspace)
            if step.per_call():
                queued.append(lambda ptr=ptr, nbytes=nbytes: cupy.cuda.runtime.memsetAsync(ptr, 0, nbytes, stream_ptr))
            else:  # zeroed once, here, on the launch's stream (before any call): the kernels leave it zero
                cupy.cuda.runtime.memsetAsync(ptr, 0, nbytes, stream_ptr)
            continue
        if not step.runs(sizes):
            continue
        args: list[Any] = []
        for name in plan.step_params(step):
            if name in maps:
                args.append(ctypes.create_string_buffer(maps[name], 128))
                map_buffers.setdefault(name, []).append(args[-1])
            elif name in sizes:
                args.append(ctypes.c_int(sizes[name]))
            elif name in named:
                args.append(ctypes.c_void_p(_pointer(named[name])))
                pointer_slots.setdefault(name, []).append(args[-1])
            else:
                raise LaunchFailed(f"{step.name} takes {name!r}, which neither the family's arguments nor the plan's "
                                   "scratch give")
        packed = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        keep += [args, packed]
        grid = plan.grid(step, sizes, loaded.resident.get(step.name))
        function = loaded.functions[step.name]
        if step.cluster is not None and step.cluster != (1, 1, 1):
            cfg = _launch_config(step, grid, stream_ptr)
            keep.append(cfg)
            queued.append(lambda f=function, cfg=cfg, p=packed, name=step.name: _ok(
                d.cuLaunchKernelEx(cfg, f, ctypes.addressof(p), 0), f"cuLaunchKernelEx({name})"))
        elif _raw_launch() is not None:
            raw_args = (ctypes.c_void_p(int(function)), *grid, *step.block, step.dynamic_smem_bytes,
                        ctypes.c_void_p(stream_ptr), ctypes.c_void_p(ctypes.addressof(packed)), None)
            queued.append(lambda a=raw_args, launch=_raw_launch(), what=f"cuLaunchKernel({step.name})":
                          _ok_code(launch(*a), what))
        else:
            queued.append(lambda f=function, g=grid, b=step.block, s=step.dynamic_smem_bytes, p=packed, name=step.name:
                          _ok(d.cuLaunchKernel(f, *g, *b, s, stream, ctypes.addressof(p), 0), f"cuLaunchKernel({name})"))
    return BoundLaunch(queued, keep, pointer_slots, map_buffers, plan, sizes)


# ---- checking and timing on the target's GPU ---------------------------------------------------------------------------

def gpu_ready(index: int = 0) -> str | None:
    """None if CuPy, cuda.bindings and a GPU as device `index` are here, else what is missing."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        if count <= index:
            return "no CUDA device is visible" if count < 1 else f"there is no CUDA device {index} ({count} visible)"
        _driver()
    except Exception as e:  # ImportError, or a CUDA runtime error without a driver
        return f"CuPy/cuda.bindings are not usable here ({type(e).__name__}: {e})"
    return None


def _compute_capability() -> tuple[int, int]:
    cc = str(_cupy().cuda.Device().compute_capability)  # "90" on Hopper
    return int(cc[:-1]), int(cc[-1])


def evaluate(op: Any, family: Any, problem: Any, artifact: Artifact, target: Target, *, seed: int,
             policy: TimingPolicy | None) -> Evaluation:
    """Load, check against the float64 reference, and (with a policy) time one compiled configuration on the
    target's GPU. Kernel faults become statuses."""
    missing = gpu_ready(target.device_index or 0)
    if missing:
        return Evaluation(Status.LAUNCH_ERROR, missing, compile_s=artifact.compile_s)
    cupy = _cupy()
    try:
        with cupy.cuda.Device(target.device_index or 0):
            wrong = runs_on(artifact.arch or "", _compute_capability())
            if wrong:
                return Evaluation(Status.LAUNCH_ERROR, wrong, compile_s=artifact.compile_s)
            return run_checked(op, problem, gpu_device(),
                               lambda operands: bind(load(artifact), family.args(problem, operands)),
                               seed=seed, policy=policy, compile_s=artifact.compile_s)
    except Exception as e:
        return failure(Status.LAUNCH_ERROR, e, artifact.compile_s)


def launcher(family: Any, problem: Any, artifact: Artifact, operands: Mapping[str, Any], *,
             stream: int | None = None) -> Callable[[], None]:
    """The artifact's plan over the caller's device arrays on the current device, queued on `stream`."""
    return bind(load(artifact), family.args(problem, operands), stream)


def evaluate_baseline(op: Any, baseline: Any, problem: Any, target: Target, *, seed: int,
                      policy: TimingPolicy | None) -> tuple[str, Evaluation]:
    """A library baseline (ops/base.Baseline) on the target's GPU, checked and timed like a kernel: (what ran,
    evaluation)."""
    cupy = _cupy()
    prepared: list[Any] = []

    def launcher(operands: Mapping[str, Any]) -> Any:
        prepared.append(baseline.prepare(problem, operands))
        return prepared[0]

    with cupy.cuda.Device(target.device_index or 0):
        ev = run_checked(op, problem, gpu_device(), launcher, seed=seed, policy=policy)
    return (prepared[0].label if prepared else baseline.name), ev


__all__ = ["L2Flush", "LaunchFailed", "LoadedModule", "bind", "compile_artifact", "compile_program", "device_target",
           "encode_im2col", "encode_map", "encode_tensor_map", "encode_tiled", "evaluate", "evaluate_baseline",
           "gpu_device", "gpu_ready", "load", "runs_on"]
