"""Compile CUDA C++ to cubin and PTX with NVRTC, without a GPU.

NVRTC is loaded through ctypes from the `nvidia-cuda-nvrtc` wheel (found by `cuda-pathfinder`) or the system CUDA;
`cuda_fp16.h`/`cuda_bf16.h` come from the `nvidia-cuda-runtime` wheel or the system CUDA. The ptxas resource
report (registers, shared memory, spills, stack) is parsed from the compile log and kept with the binary.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tracea_cli.errors import ToolchainMissing

_INSTALL_HINT = "Install the CUDA extra: pip install 'tracea[cuda]' (brings nvidia-cuda-nvrtc==13.0.* and the headers)."


@dataclass(frozen=True)
class CompileOptions:
    """NVRTC options as words. `arch` is a real architecture ("sm_90", "sm_90a"): the output is a cubin for it."""

    arch: str
    std: str = "c++17"
    fast_math: bool = False
    max_registers: int | None = None
    include_dirs: tuple[str, ...] = ()
    defines: tuple[tuple[str, str], ...] = ()
    line_info: bool = False

    def to_args(self) -> list[str]:
        args = [f"-arch={self.arch}", f"-std={self.std}", "--ptxas-options=-v", "-default-device"]
        if self.fast_math:
            args.append("-use_fast_math")
        if self.max_registers:
            args.append(f"-maxrregcount={self.max_registers}")
        if self.line_info:
            args.append("-lineinfo")
        args += [f"-I{d}" for d in self.include_dirs]
        args += [f"-D{k}={v}" for k, v in self.defines]
        return args


@dataclass(frozen=True)
class KernelResources:
    """One entry function's line of the ptxas report."""

    registers: int = 0
    shared_bytes: int = 0  # static shared memory
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    constant_bytes: int = 0
    barriers: int = 0


@dataclass(frozen=True)
class CompiledProgram:
    cubin: bytes
    ptx: str
    log: str
    resources: dict[str, KernelResources] = field(default_factory=dict)
    compile_s: float = 0.0
    nvrtc_version: str = ""
    ptx_isa: str = ""
    warnings: tuple[str, ...] = ()


class NvrtcError(Exception):
    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


_FUNC = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")
_BARS = re.compile(r"used (\d+) barriers")


def parse_ptxas_report(log: str) -> dict[str, KernelResources]:
    """Resources per entry function from `ptxas -v` output (as NVRTC or nvcc prints it)."""
    out: dict[str, KernelResources] = {}
    current: str | None = None
    fields: dict[str, int] = {}
    for line in log.splitlines():
        m = _FUNC.search(line)
        if m:
            if current is not None:
                out[current] = KernelResources(**fields)
            current, fields = m.group(1), {}
            continue
        if current is None:
            continue
        if m := _PROPS.search(line):
            fields.update(stack_bytes=int(m[1]), spill_store_bytes=int(m[2]), spill_load_bytes=int(m[3]))
        if m := _USED.search(line):
            fields["registers"] = int(m[1])
            if s := _SMEM.search(line):
                fields["shared_bytes"] = int(s[1])
            if c := _CMEM.search(line):
                fields["constant_bytes"] = int(c[1])
            if b := _BARS.search(line):
                fields["barriers"] = int(b[1])
    if current is not None:
        out[current] = KernelResources(**fields)
    return out


def _candidate_lib_paths() -> list[str]:
    paths = []
    try:
        import cuda.pathfinder as pathfinder

        paths.append(pathfinder.load_nvidia_dynamic_lib("nvrtc").abs_path)
    except Exception:
        pass
    for root in filter(None, [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"]):
        paths += sorted(glob.glob(f"{root}/lib64/libnvrtc.so*"), reverse=True)
    paths.append("libnvrtc.so.13")
    return paths


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    errors = []
    for path in _candidate_lib_paths():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
    raise ToolchainMissing("NVRTC (libnvrtc) was not found.", _INSTALL_HINT)


@functools.lru_cache(maxsize=1)
def cuda_include_dir() -> str:
    """Folder holding cuda_fp16.h and cuda_bf16.h."""
    try:
        import cuda.pathfinder as pathfinder

        found = pathfinder.find_nvidia_header_directory("cudart")
        if found and Path(found, "cuda_fp16.h").exists():
            return str(found)
    except Exception:
        pass
    for root in filter(None, [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"]):
        if Path(root, "include", "cuda_fp16.h").exists():
            return str(Path(root, "include"))
    raise ToolchainMissing("the CUDA headers (cuda_fp16.h) were not found.", _INSTALL_HINT)


def available() -> bool:
    try:
        _lib()
        return True
    except ToolchainMissing:
        return False


def version() -> str:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(_lib().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return f"{major.value}.{minor.value}"


def supported_archs() -> list[str]:
    lib = _lib()
    n = ctypes.c_int()
    _check(lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)), "nvrtcGetNumSupportedArchs")
    arr = (ctypes.c_int * n.value)()
    _check(lib.nvrtcGetSupportedArchs(arr), "nvrtcGetSupportedArchs")
    return [f"sm_{v}" for v in arr]


def _check(code: int, what: str) -> None:
    if code != 0:
        lib = _lib()
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise NvrtcError(f"{what} failed: {lib.nvrtcGetErrorString(code).decode()}")


def _read(prog: ctypes.c_void_p, size_fn: str, get_fn: str) -> bytes:
    lib = _lib()
    n = ctypes.c_size_t()
    if getattr(lib, size_fn)(prog, ctypes.byref(n)) != 0 or n.value == 0:
        return b""
    buf = ctypes.create_string_buffer(n.value)
    getattr(lib, get_fn)(prog, buf)
    return buf.raw[: n.value]


@functools.lru_cache(maxsize=1)
def _caches_programs() -> bool:
    """NVRTC 12.9+ keeps a cache of compiled programs; a hit skips ptxas, and with it the resource report."""
    major, minor = (int(x) for x in version().split("."))
    return (major, minor) >= (12, 9)


_first_compile = threading.Lock()
_builtins_loaded = False


def compile_source(source: str, options: CompileOptions, *, name: str = "kernel.cu", want_ptx: bool = True) -> CompiledProgram:
    """Compile `source` to a cubin for `options.arch` (and PTX when asked). Raises NvrtcError with the log on failure.

    The first compile of a process runs alone: NVRTC loads libnvrtc-builtins on first use, and threads that race
    there fail with "failed to open libnvrtc-builtins.so" (seen with NVRTC 13.0: 9 of 16 concurrent first compiles
    failed; none once one compile had finished). Later compiles run in parallel."""
    global _builtins_loaded
    if not _builtins_loaded:
        with _first_compile:
            if not _builtins_loaded:
                try:
                    return _compile(source, options, name=name, want_ptx=want_ptx)
                finally:
                    _builtins_loaded = True
    return _compile(source, options, name=name, want_ptx=want_ptx)


def _compile(source: str, options: CompileOptions, *, name: str, want_ptx: bool) -> CompiledProgram:
    lib = _lib()
    opts = CompileOptions(**{**options.__dict__, "include_dirs": options.include_dirs + (cuda_include_dir(),)})
    args = [a.encode() for a in opts.to_args() + (["--no-cache"] if _caches_programs() else [])]
    prog = ctypes.c_void_p()
    _check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None), "nvrtcCreateProgram")
    try:
        t0 = time.perf_counter()
        code = lib.nvrtcCompileProgram(prog, len(args), (ctypes.c_char_p * len(args))(*args))
        elapsed = time.perf_counter() - t0
        log = _read(prog, "nvrtcGetProgramLogSize", "nvrtcGetProgramLog").rstrip(b"\0").decode(errors="replace")
        if code != 0:
            raise NvrtcError(f"NVRTC could not compile {name} for {options.arch}", log)
        cubin = _read(prog, "nvrtcGetCUBINSize", "nvrtcGetCUBIN")
        ptx = _read(prog, "nvrtcGetPTXSize", "nvrtcGetPTX").rstrip(b"\0").decode() if want_ptx else ""
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    isa = re.search(r"^\.version\s+(\S+)", ptx, re.M)
    warnings = tuple(line.strip() for line in log.splitlines() if "warning" in line.lower())
    return CompiledProgram(
        cubin=cubin,
        ptx=ptx,
        log=log,
        resources=parse_ptxas_report(log),
        compile_s=elapsed,
        nvrtc_version=version(),
        ptx_isa=isa.group(1) if isa else "",
        warnings=warnings,
    )


def cubin_arch(cubin: bytes) -> str:
    """The SM architecture recorded in a cubin's ELF header (e_flags), e.g. "sm_90".

    The header does not tell sm_90 from sm_90a (NVRTC 13.0 writes the same flags); the PTX `.target` line does.
    """
    import struct

    if cubin[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    e_flags = struct.unpack_from("<I", cubin, 0x30)[0]
    # ELF ABI version 8 and later (CUDA 12+) keep the SM number in bits 8..15; older ones in bits 0..7.
    sm = (e_flags >> 8) & 0xFF if cubin[8] >= 8 else e_flags & 0xFF
    return f"sm_{sm}"
