"""lowrank-mlp kernel families: fused.py (CUDA: T = x·U kept on chip, then ·V with the epilogue; mma.sync, fp32 as
3xTF32; space in fused_space.py), two_gemm.py (CUDA: two GEMM engine kernels, the epilogue fused into the second;
space in two_gemm_space.py), both over kernel_abi.py (their parameters and template), and numba.py (the CPU two-phase
kernel, space in numba_space.py)."""
