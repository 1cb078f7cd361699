"""conv2d kernel families: numba.py (the CPU implicit GEMM) with its space in numba_space.py."""
