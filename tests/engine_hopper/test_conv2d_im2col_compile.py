"""conv2d's wgmma family beyond 1x1 stride 1, compiled on the CPU (its GPU checks: test_conv2d_wgmma_gpu.py): the TMA
im2col kernel (kernels/cuda/conv2d_wgmma_im2col.cuh) builds for sm_90a in every dtype and epilogue kind, tile shape,
schedule, cluster and store, without spills or stack, with the wgmma pipeline kept and setmaxnreg honoured; its PTX
holds the im2col and 3-D tiled loads; and the GEMM kernel's own entry point is left out of its translation unit."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from tracea_cli.backends import cuda, nvrtc
from tracea_cli.ops.conv2d.families import wgmma as cw
from tracea_cli.ops.conv2d.problem import Conv2dProblem

pytestmark = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")


def cfg(tm=128, tn=128, stages=4, consumers=2, schedule="cooperative", cluster=1, store="direct"):
    return {"family": "wgmma", "tile_m": tm, "tile_n": tn, "stages": stages, "consumers": consumers,
            "schedule": schedule, "cluster_m": cluster, "persistent": 1, "group_m": 8, "store": store}


CASES = {
    "fp16 3x3 same bias_relu 128x128 tma": (Conv2dProblem(32, 56, 56, 64, 64, 3, 3, 1, 1, 1, 1, dtype="fp16",
                                                          epilogue="bias_relu"), cfg(store="tma")),
    "fp16 3x3/2 bias_residual_relu 128x64": (Conv2dProblem(32, 56, 56, 128, 128, 3, 3, 2, 2, 1, 1, dtype="fp16",
                                                           epilogue="bias_residual_relu"), cfg(tn=64, stages=6)),
    "bf16 3x3 128x256 cluster 2": (Conv2dProblem(32, 14, 14, 256, 256, 3, 3, 1, 1, 1, 1, dtype="bf16"),
                                   cfg(tn=256, stages=3, cluster=2)),
    "bf16 1x1/2 pingpong silu": (Conv2dProblem(32, 28, 28, 512, 1024, 1, 1, 2, 2, dtype="bf16", epilogue="bias_silu"),
                                 cfg(schedule="pingpong", store="tma")),
    "tf32 7x7/2 dilated 64x64 one consumer": (Conv2dProblem(4, 30, 30, 16, 64, 7, 7, 2, 2, 3, 3, 2, 2, dtype="tf32",
                                                             epilogue="bias_residual"), cfg(64, 64, 4, consumers=1)),
}


@pytest.fixture(scope="module")
def programs():
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(zip(CASES, pool.map(lambda case: cuda.compile_program(cw.im2col_source(*case), "sm_90a",
                                                                          (cw.IM2COL_KERNEL,)), CASES.values())))


@pytest.mark.parametrize("name", CASES)
def test_the_im2col_kernel_builds_for_sm90a_without_spills(programs, name):
    program = programs[name]
    assert program.cubin[:4] == b"\x7fELF" and nvrtc.cubin_arch(program.cubin) == "sm_90"
    assert set(program.resources) == {cw.IM2COL_KERNEL}  # the GEMM kernel's own entry is not in this unit
    res = program.resources[cw.IM2COL_KERNEL]
    assert 0 < res.registers <= 255 and res.spill_store_bytes == res.spill_load_bytes == res.stack_bytes == 0
    assert cuda.SERIALIZED_WGMMA not in program.log and cuda.IGNORED_SETMAXNREG not in program.log, program.log
    assert "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes" in program.ptx
    assert "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes" in program.ptx
    assert program.ptx.count("wgmma.mma_async") > 0


def test_the_source_names_its_geometry_and_epilogue():
    problem, config = CASES["fp16 3x3/2 bias_residual_relu 128x64"]
    source = cw.im2col_source(problem, config)
    assert "#define WG_CONV_R 3\n" in source and "#define WG_CONV_S 3\n" in source
    assert "#define WG_POST_RELU 1\n" in source and "#define WG_EPILOGUE 5\n" in source
    assert "#define WG_B_KMAJOR 1\n" in source and source.startswith("// tracea conv2d, family wgmma, im2col: ")
    assert "gemm_wgmma(" not in source and source.count("conv2d_wgmma_im2col(") == 1
