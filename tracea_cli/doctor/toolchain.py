"""The compile toolchain: NVRTC (version, architectures), which CuPy build is installed, and whether NVRTC can build a
tensor-core kernel for a given architecture. None of this needs a GPU."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from tracea_cli.backends import nvrtc

#: CuPy distributions, newest CUDA first
CUPY_DISTRIBUTIONS = ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy")

#: the oldest Linux driver that supports each CUDA major (CUDA release notes, "CUDA Toolkit and driver versions")
MIN_DRIVER = {13: "580.65.06", 12: "525.60.13", 11: "450.80.02"}


@dataclass(frozen=True)
class NvrtcInfo:
    available: bool
    version: str | None = None  # "13.0"
    archs: tuple[str, ...] = ()
    reason: str = ""


def probe_nvrtc() -> NvrtcInfo:
    try:
        return NvrtcInfo(available=True, version=nvrtc.version(), archs=tuple(nvrtc.supported_archs()))
    except Exception as e:  # ToolchainMissing, or a library that loads but fails
        return NvrtcInfo(available=False, reason=getattr(e, "message", None) or str(e))


def cupy_build(packages: Mapping[str, str | None]) -> tuple[str | None, str | None, int | None]:
    """(distribution, version, CUDA major it is built for) from the installed distributions, without importing CuPy."""
    for dist in CUPY_DISTRIBUTIONS:
        version = packages.get(dist)
        if version:
            m = re.fullmatch(r"cupy-cuda(\d+)x", dist)
            return dist, version, int(m[1]) if m else None
    return None, None, None


def cuda_version_text(v: int | None) -> str:
    """13000 -> "13.0"."""
    return "unknown" if v is None else f"{v // 1000}.{(v % 1000) // 10}"


def _mma_source(cc: tuple[int, int]) -> tuple[str, str]:
    """A minimal tensor-core kernel for `cc` (one mma.sync), and the instruction it uses."""
    if cc >= (8, 0):
        shape, a_regs, b_regs = "m16n8k16", 4, 2
    else:  # Turing
        shape, a_regs, b_regs = "m16n8k8", 2, 1
    inst = f"mma.sync.aligned.{shape}.row.col.f32.f16.f16.f32"
    a = [f"%{4 + i}" for i in range(a_regs)]
    b = [f"%{4 + a_regs + i}" for i in range(b_regs)]
    operands = ", ".join(f'"r"(a[{i}])' for i in range(a_regs)) + ", " + ", ".join(f'"r"(b[{i}])' for i in range(b_regs))
    source = f"""
extern "C" __global__ void tracea_mma_probe(const unsigned* a, const unsigned* b, float* d) {{
  float acc[4] = {{0.f, 0.f, 0.f, 0.f}};
  asm volatile("{inst} {{%0,%1,%2,%3}}, {{{','.join(a)}}}, {{{','.join(b)}}}, {{%0,%1,%2,%3}};"
               : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]) : {operands});
  for (int i = 0; i < 4; ++i) d[threadIdx.x * 4 + i] = acc[i];
}}
"""
    return source, inst


@dataclass(frozen=True)
class TensorCoreProbe:
    arch: str
    ok: bool
    detail: str  # the instruction compiled, or the compiler's complaint


def tensor_core_probe(cc: tuple[int, int], supported: tuple[str, ...]) -> TensorCoreProbe:
    """Compile one mma.sync kernel for `cc` with NVRTC (about 50 ms, no GPU needed)."""
    arch = f"sm_{cc[0]}{cc[1]}"
    if cc < (7, 5):
        return TensorCoreProbe(arch, False, f"{arch} has no mma.sync tensor-core instructions Tracea uses (needs sm_75+)")
    if supported and arch not in supported:
        return TensorCoreProbe(arch, False, f"this NVRTC cannot target {arch}; it supports {', '.join(supported)}")
    source, inst = _mma_source(cc)
    try:
        nvrtc.compile_source(source, nvrtc.CompileOptions(arch=arch), name="tracea_mma_probe.cu", want_ptx=False)
    except nvrtc.NvrtcError as e:
        log = " ".join(e.log.split())[:300]
        return TensorCoreProbe(arch, False, f"{e}: {log}")
    except Exception as e:  # NVRTC absent or broken
        return TensorCoreProbe(arch, False, getattr(e, "message", None) or str(e))
    return TensorCoreProbe(arch, True, f"compiled {inst} for {arch}")
