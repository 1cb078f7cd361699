"""lowrank-mlp kernel families: numba.py (the CPU two-phase kernel, space in numba_space.py)."""
