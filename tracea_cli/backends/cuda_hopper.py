"""The Hopper GEMM family on CUDA: NVRTC builds sm_90a cubins; cuda.bindings launches them with tensor maps and clusters.

Compiling needs no GPU (NVRTC through `backends.nvrtc`). Running needs CuPy, which owns the memory, the stream and the
events, and cuda.bindings, which loads the cubin, encodes the TMA tensor maps (`cuTensorMapEncodeTiled`) and launches
with cluster dimensions (`cuLaunchKernelEx`): CuPy can do neither. The operands (`cuda.upload`), the check before
timing, the timing and the cuBLAS baseline are the CUDA engine's (backends/cuda.py). The kernel ABI is in
docs/kernel-abi.md ("Hopper family"); `launch_description` is its machine-readable form, which the C header export
follows. Problems that TMA cannot read in place (hopper_space.staging) get staging kernels in the same cubin, launched
first on the same stream into scratch that `LoadedKernel.bind` allocates (`scratch_layout`).
"""

from __future__ import annotations

import ctypes
import hashlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from tracea_cli.backends import nvrtc
from tracea_cli.backends.base import Artifact, CompileFailed, Evaluation, Status
from tracea_cli.backends.cuda import (
    CudaBackend,
    DeviceOperands,
    grid_extent,
    run_checked,
    upload,
)
from tracea_cli.errors import UsageError
from tracea_cli.ops.gemm import hopper_space as hs
from tracea_cli.ops.gemm.problem import GemmInputs, GemmProblem
from tracea_cli.resources import kernel_source
from tracea_cli.space import SearchSpace, Value, config_key
from tracea_cli.target import Target
from tracea_cli.timing import TimingPolicy

KERNEL_NAME = "gemm_wgmma"
STAGE_A_NAME = "gemm_stage_a"
STAGE_B_NAME = "gemm_stage_b"
HEADER = "cuda/gemm_wgmma.cuh"
MMA_HEADER = "cuda/gemm_wgmma_mma.cuh"
STAGE_HEADER = "cuda/gemm_wgmma_stage.cuh"
ARCH = "sm_90a"  # wgmma and setmaxnreg exist only on the architecture-specific target
PARAM_ORDER = ("map_a", "map_b", "map_c", "C", "bias", "residual", "M", "N", "K", "ldc")
POINTER_PARAMS = ("A", "B", "A_staged", "B_staged")  # the staging kernels' pointer parameters; the others are ints
STAGE_THREADS = 256  # gemm_wgmma_stage.cuh: kThreads
STAGE_COPY_ROWS = 8  # rows per block of the copy (one warp each)
STAGE_COPY_BYTES = 512  # bytes of columns per block of the copy (a warp's 32 16-byte chunks)
STAGE_TILE = 64  # the transpose's tile (64 x 64 elements)
SCRATCH_ALIGN_BYTES = 256  # every scratch buffer starts on a multiple of this within the workspace
SERIALIZED_WGMMA = "C7510"  # ptxas: the wgmma pipeline was serialised (correct, but slow)
IGNORED_SETMAXNREG = "C7508"  # ptxas: setmaxnreg was ignored


# ---- source, launch description, compile (no GPU) -------------------------------------------------------------------


def headers_text(problem: GemmProblem | None = None) -> str:
    """The family's headers, the mma wrappers inlined where the kernel includes them; the staging entries appended
    when `problem` needs them (hs.staging)."""
    kernel = kernel_source(HEADER)
    text = kernel.replace('#include "gemm_wgmma_mma.cuh"', kernel_source(MMA_HEADER), 1)
    if problem is not None and hs.staging(problem).any:
        text += "\n" + kernel_source(STAGE_HEADER)
    return text


def defines(problem: GemmProblem, config: Mapping[str, Value]) -> dict[str, int]:
    staged = hs.staging(problem)
    out = {
        "WG_DTYPE": hs.DTYPE_CODES[problem.dtype],
        "WG_TILE_M": int(config["tile_m"]),
        "WG_TILE_N": int(config["tile_n"]),
        "WG_STAGES": int(config["stages"]),
        "WG_CONSUMERS": int(config["consumers"]),
        "WG_CLUSTER_M": int(config["cluster_m"]),
        "WG_PERSISTENT": int(config["persistent"]),
        "WG_GROUP_M": int(config["group_m"]),
        "WG_B_KMAJOR": 1 if problem.layout == "nt" or staged.b == "transpose" else 0,
        "WG_EPILOGUE": hs.EPILOGUE_CODES[problem.epilogue],
        "WG_STORE_TMA": 1 if config["store"] == "tma" else 0,
        "WG_PINGPONG": 1 if config["schedule"] == "pingpong" else 0,
    }
    if staged.any:
        out["WG_STAGE_A"] = int(staged.pad_a)
        out["WG_STAGE_B"] = {None: 0, "pad": 1, "transpose": 2}[staged.b]
    return out


def kernel_source_for(problem: GemmProblem, config: Mapping[str, Value]) -> str:
    """The exact, self-contained translation unit compiled for this configuration."""
    head = f"// tracea gemm, family wgmma: {problem.label}, config {config_key(config)}\n"
    return head + "".join(f"#define {k} {v}\n" for k, v in defines(problem, config).items()) + headers_text(problem)


def source_hash(problem: GemmProblem | None = None) -> str:
    return hashlib.sha256(headers_text(problem).encode()).hexdigest()[:16]


def _scratch(problem: GemmProblem) -> list[dict[str, Any]]:
    """The scratch buffers of the staging pre-pass (docs/kernel-abi.md, "Staging"): each rows x cols, row-major, its
    leading dimension `ld` = cols rounded up to `ld_multiple` elements; in this order in the workspace, each starting
    at the next multiple of `align_bytes`."""
    staged = hs.staging(problem)
    common = {"cols": "K", "ld_multiple": hs.staged_ld_multiple(problem.dtype),
              "elem_bytes": hs.elem_bytes(problem.dtype), "align_bytes": SCRATCH_ALIGN_BYTES}
    out = []
    if staged.pad_a:
        out.append({"name": "A_staged", "source": "A", "transposed": False, "rows": "M", "ld": "lda_staged", **common})
    if staged.b is not None:
        out.append({"name": "B_staged", "source": "B", "transposed": staged.b == "transpose", "rows": "N",
                    "ld": "ldb_staged", **common})
    return out


def _stage_steps(problem: GemmProblem) -> list[dict[str, Any]]:
    """Kernel steps of the staging pre-pass; they run before gemm_wgmma on the same stream."""
    staged = hs.staging(problem)
    copy_cols = f"k/{STAGE_COPY_BYTES // hs.elem_bytes(problem.dtype)}"
    common = {"kind": "kernel", "block": [STAGE_THREADS, 1, 1], "dynamic_smem_bytes": 0}
    steps = []
    if staged.pad_a:
        steps.append({**common, "name": STAGE_A_NAME, "grid": {"x": f"m/{STAGE_COPY_ROWS}", "y": copy_cols, "z": 1},
                      "params": ["A", "A_staged", "M", "K", "lda", "lda_staged"]})
    if staged.b is not None:
        grid = ({"x": f"n/{STAGE_TILE}", "y": f"k/{STAGE_TILE}", "z": 1} if staged.b == "transpose"
                else {"x": f"n/{STAGE_COPY_ROWS}", "y": copy_cols, "z": 1})
        steps.append({**common, "name": STAGE_B_NAME, "grid": grid,
                      "params": ["B", "B_staged", "N", "K", "ldb", "ldb_staged"]})
    return steps


def _tensor_maps(problem: GemmProblem, config: Mapping[str, Value]) -> dict[str, dict[str, Any]]:
    tk = hs.tile_k(problem.dtype)
    cluster = int(config["cluster_m"])
    staged = hs.staging(problem)
    common = {"dtype": problem.dtype, "elem_bytes": hs.elem_bytes(problem.dtype), "swizzle": "128B",
              "interleave": "none", "l2_promotion": "256B", "oob_fill": "zero"}
    chunk = hs.SWIZZLE_BYTES // hs.elem_bytes(problem.dtype)
    a = ({"tensor": "A_staged", "row_stride": "lda_staged"} if staged.pad_a else {"tensor": "A", "row_stride": "lda"})
    if staged.b is not None:  # B_staged is N x K: read K-major as in nt
        b = {"tensor": "B_staged", "dims": ["K", "N"], "row_stride": "ldb_staged",
             "box": [tk, int(config["tile_n"]) // cluster]}
    elif problem.layout == "nt":
        b = {"tensor": "B", "dims": ["K", "N"], "row_stride": "ldb", "box": [tk, int(config["tile_n"]) // cluster]}
    else:
        b = {"tensor": "B", "dims": ["N", "K"], "row_stride": "ldb", "box": [chunk, tk // cluster]}
    return {
        "map_a": {**a, "dims": ["K", "M"], "box": [tk, int(config["tile_m"])], **common},
        "map_b": {**b, **common},
        "map_c": {"tensor": "C", "dims": ["N", "M"], "row_stride": "ldc",
                  "box": [chunk, hs.consumer_rows(config)],
                  **common, "dtype": "fp32" if problem.dtype == "tf32" else problem.dtype},
    }


def launch_description(problem: GemmProblem, config: Mapping[str, Value]) -> dict[str, Any]:
    """How a host runs the kernel: the staging steps (if any) and the main kernel, params, tensor maps (innermost
    dimension first), grid rules, cluster, shared memory, and the scratch the staging writes."""
    cluster = int(config["cluster_m"])
    description: dict[str, Any] = {
        "family": hs.FAMILY,
        "arch": ARCH,
        "steps": _stage_steps(problem) + [{
            "kind": "kernel",
            "name": KERNEL_NAME,
            "block": [hs.threads(config), 1, 1],
            "grid": {"x": "persistent_clusters" if int(config["persistent"]) else "work_clusters", "y": 1, "z": 1},
            "cluster": [cluster, 1, 1],
            "dynamic_smem_bytes": hs.smem_bytes(problem.dtype, config),
        }],
        "params": list(PARAM_ORDER),
        "tensor_maps": _tensor_maps(problem, config),
        "tile_m": int(config["tile_m"]),
        "tile_n": int(config["tile_n"]),
        "tile_k": hs.tile_k(problem.dtype),
        "cluster_m": cluster,
        "persistent": int(config["persistent"]),
        "work": "ceil(ceil(M/tile_m)/cluster_m) * ceil(N/tile_n)",
        "alignment_bytes": hs.ALIGN_BYTES,
    }
    scratch = _scratch(problem)
    if scratch:
        description["scratch"] = scratch
    return description


@dataclass(frozen=True)
class ScratchBuffer:
    name: str  # "A_staged" | "B_staged"
    ld_name: str  # "lda_staged" | "ldb_staged": how params and tensor maps name its leading dimension
    offset: int  # bytes from the start of the workspace
    ld: int  # leading dimension in elements
    nbytes: int


def scratch_layout(launch: Mapping[str, Any], m: int, n: int, k: int) -> tuple[list[ScratchBuffer], int]:
    """(the scratch buffers of a launch description for an M x N x K call, the workspace bytes they need in all).
    The M x N workspace of `workspace_bytes_per_mn` (split-K families) comes first; the buffers follow in order."""
    sizes = {"M": m, "N": n, "K": k}
    offset = int(launch.get("workspace_bytes_per_mn", 0)) * m * n
    buffers = []
    for spec in launch.get("scratch", ()):
        align = int(spec["align_bytes"])
        offset = -(-offset // align) * align
        mult = int(spec["ld_multiple"])
        ld = -(-sizes[spec["cols"]] // mult) * mult
        nbytes = sizes[spec["rows"]] * ld * int(spec["elem_bytes"])
        buffers.append(ScratchBuffer(spec["name"], spec["ld"], offset, ld, nbytes))
        offset += nbytes
    return buffers, offset


def compile_config(problem: GemmProblem, config: Mapping[str, Value], target: Target) -> Artifact:
    """Build one configuration for sm_90a. Raises CompileFailed (with the reason) for a rejected or failing one."""
    space = hs.hopper_space(problem, target)
    if space is None:
        raise CompileFailed(hs.qualifies(problem, target) or "the wgmma family does not apply")
    reason = space.why_invalid(config)
    if reason:
        raise CompileFailed(f"configuration rejected before compiling: {reason}")
    source = kernel_source_for(problem, config)
    try:
        program = nvrtc.compile_source(source, nvrtc.CompileOptions(arch=ARCH), name="gemm_wgmma.cu")
    except nvrtc.NvrtcError as e:
        raise CompileFailed(f"{e}\n{e.log[-4000:]}") from None
    res = program.resources.get(KERNEL_NAME)
    resources: dict[str, Any] = dict(res.__dict__) if res else {}
    resources.update(
        kernels={name: dict(r.__dict__) for name, r in program.resources.items()},
        warnings=list(program.warnings),
        wgmma_serialized=SERIALIZED_WGMMA in program.log,
        setmaxnreg_ignored=IGNORED_SETMAXNREG in program.log,
        nvrtc_version=program.nvrtc_version,
        ptx_isa=program.ptx_isa,
        ptx_target=_ptx_target(program.ptx),
        ptx_wgmma=program.ptx.count("wgmma.mma_async"),
        log=program.log,
    )
    return Artifact(
        config=dict(config),
        kernel_name=KERNEL_NAME,
        binary=program.cubin,
        source=source,
        launch=launch_description(problem, config),
        resources=resources,
        compile_s=program.compile_s,
    )


def _ptx_target(ptx: str) -> str:
    m = re.search(r"^\.target\s+(\S+)", ptx, re.M)
    return m.group(1) if m else ""


# ---- running on the GPU (CuPy owns memory; cuda.bindings loads, encodes and launches) ------------------------------


class LaunchFailed(RuntimeError):
    """A driver call for loading or launching failed; the message names the call and the CUDA error."""


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:  # cuda-python before the cuda.bindings namespace
        from cuda import cuda as driver  # type: ignore[no-redef]
    return driver


def _ok(result: tuple, what: str) -> Any:
    driver = _driver()
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        name = getattr(err, "name", str(err))
        raise LaunchFailed(f"{what} failed: {name}")
    return rest[0] if len(rest) == 1 else rest


# tf32 operands load through TFLOAT32 maps: relative error 2.6e-4 on the H200, against 6.9e-4 through FLOAT32 maps
# (where wgmma truncates); a tf32 problem's C is plain fp32.
_MAP_DTYPE = {"fp16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", "bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
              "tf32": "CU_TENSOR_MAP_DATA_TYPE_TFLOAT32", "fp32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"}


def encode_tensor_map(ptr: int, spec: Mapping[str, Any], sizes: Mapping[str, int]) -> bytes:
    """The 128-byte CUtensorMap for one entry of `launch_description(...)["tensor_maps"]`, over memory at `ptr`."""
    d = _driver()
    esize = int(spec["elem_bytes"])
    dims = [int(sizes[name]) for name in spec["dims"]]
    stride = int(sizes[spec["row_stride"]]) * esize
    tmap = _ok(d.cuTensorMapEncodeTiled(
        getattr(d.CUtensorMapDataType, _MAP_DTYPE[spec["dtype"]]),
        2,
        ptr,
        [d.cuuint64_t(v) for v in dims],
        [d.cuuint64_t(stride)],
        [d.cuuint32_t(int(v)) for v in spec["box"]],
        [d.cuuint32_t(1), d.cuuint32_t(1)],
        d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    ), f"cuTensorMapEncodeTiled({spec['tensor']})")
    return ctypes.string_at(int(tmap.getPtr()), 128)


class LoadedKernel:
    """A cubin loaded into the current context: its kernels found (the staging entries and gemm_wgmma), the main
    kernel's shared-memory limit raised and its resident-grid size known."""

    def __init__(self, artifact: Artifact) -> None:
        import cupy

        d = _driver()
        cupy.cuda.Device().use()
        cupy.cuda.runtime.free(0)  # makes sure the primary context exists and is current
        self.artifact = artifact
        steps = [s for s in artifact.launch["steps"] if s["kind"] == "kernel"]
        self.step = next(s for s in steps if s["name"] == artifact.kernel_name)
        self.stage_steps = [s for s in steps if s["name"] != artifact.kernel_name]
        self.module = _ok(d.cuModuleLoadData(artifact.binary), "cuModuleLoadData")
        self.functions = {s["name"]: _ok(d.cuModuleGetFunction(self.module, s["name"].encode()), "cuModuleGetFunction")
                          for s in steps}
        self.function = self.functions[artifact.kernel_name]
        smem = int(self.step["dynamic_smem_bytes"])
        _ok(d.cuFuncSetAttribute(self.function, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 smem), "cuFuncSetAttribute")
        self.sm_count = int(cupy.cuda.Device().attributes["MultiProcessorCount"])
        self.cluster = int(self.step["cluster"][0])
        self.resident_clusters = self._resident_clusters()

    def _config(self, grid_x: int, stream_ptr: int):
        d = _driver()
        cfg = d.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid_x, 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (int(v) for v in self.step["block"])
        cfg.sharedMemBytes = int(self.step["dynamic_smem_bytes"])
        cfg.hStream = d.CUstream(stream_ptr)
        if self.cluster > 1:
            attr = d.CUlaunchAttribute()
            attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = self.cluster, 1, 1
            cfg.attrs = [attr]
            cfg.numAttrs = 1
        else:
            cfg.numAttrs = 0
        return cfg

    def _resident_clusters(self) -> int:
        """Clusters (or CTAs, for clusters of one) that fit on the device at once: the persistent grid."""
        d = _driver()
        if self.cluster > 1:
            cfg = self._config(self.sm_count * self.cluster, 0)
            n = int(_ok(d.cuOccupancyMaxActiveClusters(self.function, cfg), "cuOccupancyMaxActiveClusters"))
        else:
            per_sm = _ok(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                self.function, int(self.step["block"][0]), int(self.step["dynamic_smem_bytes"])),
                "cuOccupancyMaxActiveBlocksPerMultiprocessor")
            n = int(per_sm) * self.sm_count
        if n < 1:
            raise LaunchFailed("the kernel does not fit on this device (no resident cluster)")
        return n

    def grid_x(self, problem: GemmProblem) -> int:
        work = hs.work_items(problem, self.artifact.config)
        clusters = min(work, self.resident_clusters) if self.step["grid"]["x"] == "persistent_clusters" else work
        return clusters * self.cluster

    def _stage_launcher(self, step: Mapping[str, Any], problem: GemmProblem, values: Mapping[str, Any],
                        stream_ptr: int) -> Callable[[], None]:
        """One staging kernel with its arguments packed (pointers and sizes named by the step's `params`)."""
        d = _driver()
        args = [ctypes.c_void_p(values[name]) if name in POINTER_PARAMS else ctypes.c_int(values[name])
                for name in step["params"]]
        params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(x) for x in args])
        sizes = (problem.m, problem.n, problem.k)
        grid = [grid_extent(step["grid"][axis], self.artifact.launch, *sizes) for axis in "xyz"]
        block = [int(v) for v in step["block"]]
        function = self.functions[step["name"]]
        stream = d.CUstream(stream_ptr)

        def launch() -> None:
            _ = args  # the packed arguments live as long as the launcher
            _ok(d.cuLaunchKernel(function, *grid, *block, int(step["dynamic_smem_bytes"]), stream,
                                 ctypes.addressof(params), 0), f"cuLaunchKernel({step['name']})")

        return launch

    def bind(self, problem: GemmProblem, ops: DeviceOperands, stream_ptr: int) -> Callable[[], None]:
        """A launcher for these operands (`cuda.upload`; A M×K, B K×N in nn or N×K in nt, C M×N, bias N, residual
        M×N): scratch allocated, tensor maps encoded and arguments packed once; each call launches the staging kernels
        (if any) and then the GEMM, in order on the stream."""
        import cupy

        d = _driver()
        values: dict[str, Any] = {
            "M": problem.m, "N": problem.n, "K": problem.k, "lda": problem.k,
            "ldb": problem.n if problem.layout == "nn" else problem.k, "ldc": problem.n,
            "A": ops.a.data.ptr, "B": ops.b.data.ptr, "C": ops.c.data.ptr}
        scratch, total = scratch_layout(self.artifact.launch, problem.m, problem.n, problem.k)
        workspace = cupy.empty(total, dtype=np.uint8) if scratch else None
        for buf in scratch:
            values[buf.name] = workspace.data.ptr + buf.offset
            values[buf.ld_name] = buf.ld
        stages = [self._stage_launcher(step, problem, values, stream_ptr) for step in self.stage_steps]
        maps = [encode_tensor_map(values[spec["tensor"]], spec, values)
                for spec in (self.artifact.launch["tensor_maps"][k] for k in ("map_a", "map_b", "map_c"))]
        keep: list[Any] = [ctypes.create_string_buffer(m, 128) for m in maps]
        keep += [ctypes.c_void_p(values["C"]),
                 ctypes.c_void_p(ops.bias.data.ptr if ops.bias is not None else 0),
                 ctypes.c_void_p(ops.residual.data.ptr if ops.residual is not None else 0)]
        keep += [ctypes.c_int(v) for v in (problem.m, problem.n, problem.k, values["ldc"])]
        params = (ctypes.c_void_p * len(keep))(*[ctypes.addressof(x) for x in keep])
        cfg = self._config(self.grid_x(problem), stream_ptr)
        function = self.function

        def launch() -> None:
            _ = keep, workspace  # the packed arguments and the scratch live as long as the launcher
            for stage in stages:
                stage()
            _ok(d.cuLaunchKernelEx(cfg, function, ctypes.addressof(params), 0), "cuLaunchKernelEx")

        return launch


_LOADED: dict[tuple[str, int], LoadedKernel] = {}


def load(artifact: Artifact) -> LoadedKernel:
    """The artifact's kernel in the current device's context (loaded once per process and device)."""
    import cupy

    key = (hashlib.sha256(artifact.binary or b"").hexdigest(), cupy.cuda.Device().id)
    if key not in _LOADED:
        _LOADED[key] = LoadedKernel(artifact)
    return _LOADED[key]


def _gpu_ready(index: int = 0) -> str | None:
    """None if CuPy, cuda.bindings and an sm_90 GPU as device `index` are here, else what is missing."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        if count <= index:
            return "no CUDA device is visible" if count < 1 else f"there is no CUDA device {index} ({count} visible)"
        _driver()
    except Exception as e:  # ImportError, or a CUDA runtime error without a driver
        return f"CuPy/cuda.bindings are not usable here ({type(e).__name__}: {e})"
    cc = str(cupy.cuda.Device(index).compute_capability)  # "90" on Hopper
    if cc != "90":
        return f"this GPU is compute capability {cc[:-1]}.{cc[-1]}; the wgmma family runs on 9.0 (Hopper) only"
    return None


# ---- the backend -----------------------------------------------------------------------------------------------------


class HopperBackend:
    """The wgmma family as a `backends.base.Backend` (merged into the CUDA GEMM space as family="wgmma")."""

    name = "cuda"

    def space(self, problem: GemmProblem, target: Target) -> SearchSpace:
        space = hs.hopper_space(problem, target)
        if space is None:
            raise UsageError(f"{hs.qualifies(problem, target)}.", "Use the CUDA engine's other families for this problem.")
        return space

    def source_hash(self, problem: GemmProblem) -> str:
        return source_hash(problem)

    def compile(self, problem: GemmProblem, config: Mapping[str, Value], target: Target) -> Artifact:
        return compile_config(problem, config, target)

    def evaluate(self, artifact: Artifact, problem: GemmProblem, target: Target, *, policy: TimingPolicy,
                 seed: int) -> Evaluation:
        """Fresh inputs, one checked run against the float64 reference, then timing, as the engine does
        (`cuda.run_checked`). Kernel faults become statuses."""
        missing = _gpu_ready(target.device_index or 0)
        if missing:
            return Evaluation(Status.LAUNCH_ERROR, missing, compile_s=artifact.compile_s)

        def launcher(inputs: GemmInputs) -> tuple[DeviceOperands, Callable[[], None]]:
            import cupy

            ops = upload(problem, inputs)
            return ops, load(artifact).bind(problem, ops, cupy.cuda.get_current_stream().ptr)

        return run_checked(problem, target, launcher, seed=seed, policy=policy, compile_s=artifact.compile_s)

    def baseline(self, problem: GemmProblem, target: Target, *, policy: TimingPolicy, seed: int) -> tuple[str, Evaluation]:
        """cuBLAS on the same problem, checked and timed as the engine's baseline (`CudaBackend.baseline`)."""
        return CudaBackend().baseline(problem, target, policy=policy, seed=seed)
