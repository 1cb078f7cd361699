"""Backends compile, load, run and time kernels: `cuda` (NVRTC + CuPy), `cpu` (numba). See `base.Backend`."""
