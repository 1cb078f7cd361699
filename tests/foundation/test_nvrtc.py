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
