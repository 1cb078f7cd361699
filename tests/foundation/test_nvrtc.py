"""The NVRTC layer compiles without a GPU, and the ptxas report is parsed."""

import pytest

from tracea_cli.backends import nvrtc

REAL_REPORT = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'gemm_main' for 'sm_90'
ptxas info    : Function properties for gemm_main
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 49152 bytes smem, 400 bytes cmem[0]
ptxas info    : Compile time = 12.000 ms
ptxas info    : Compiling entry function 'reduce' for 'sm_90'
ptxas info    : Function properties for reduce
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, 380 bytes cmem[0]
"""


def test_parse_ptxas_report():
    r = nvrtc.parse_ptxas_report(REAL_REPORT)
    assert r["gemm_main"] == nvrtc.KernelResources(168, 49152, 16, 8, 12, 400, 1)
    assert r["reduce"].registers == 12 and r["reduce"].shared_bytes == 0


needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed (pip install 'tracea[cuda]')")


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compile_to_cubin_for_a_named_arch(arch):
    src = '#include <cuda_fp16.h>\nextern "C" __global__ void k(__half* x) { __shared__ float s[64]; s[threadIdx.x] = __half2float(x[threadIdx.x]); __syncthreads(); x[threadIdx.x] = __float2half(s[63 - threadIdx.x]); }'
    prog = nvrtc.compile_source(src, nvrtc.CompileOptions(arch=arch))
    assert nvrtc.cubin_arch(prog.cubin) == arch
    assert prog.resources["k"].shared_bytes == 256 and prog.resources["k"].registers > 0
    assert prog.ptx_isa and prog.nvrtc_version.startswith("13.")


@needs_nvrtc
def test_compile_error_carries_the_log():
    with pytest.raises(nvrtc.NvrtcError) as e:
        nvrtc.compile_source('extern "C" __global__ void k() { undefined_thing(); }', nvrtc.CompileOptions(arch="sm_80"))
    assert "undefined_thing" in e.value.log


RACE = """
import concurrent.futures as cf
from tracea_cli.backends import nvrtc
src = 'extern "C" __global__ void k(float* y) { y[threadIdx.x] = %d.0f; }'
def one(i):
    try:
        nvrtc.compile_source(src % i, nvrtc.CompileOptions(arch="sm_80"))
        return "ok"
    except nvrtc.NvrtcError as e:
        return e.log[:200]
with cf.ThreadPoolExecutor(8) as ex:
    print([r for r in ex.map(one, range(16)) if r != "ok"])
"""


@needs_nvrtc
def test_the_first_compiles_of_a_process_may_run_in_parallel():
    """A fresh process compiling 16 programs on 8 threads at once: NVRTC loads its builtins library on first use, and
    racing threads failed there ("failed to open libnvrtc-builtins") before the first compile ran alone."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout
