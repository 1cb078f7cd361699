"""attention kernel families: numba.py (the CPU online-softmax family, space in numba_space.py). The CUDA families
(FlashAttention-2 and -3 style) live beside them in fa2*.py and fa3*.py."""
