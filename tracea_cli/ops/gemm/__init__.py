"""GEMM: C = epilogue(A·B), layouts nn (B is K×N) and nt (B is N×K, as torch.nn.Linear stores weights).

    problem.py    GemmProblem, its tensors, inputs, float64 reference, epilogues
    families/     engine (simt, mma), wgmma (Hopper), numba (CPU): each a space, sources, launch plan, arguments
    baselines.py  cuBLAS, numpy, torch
    suites.py     rows of the built-in bench suites
    op.py         OP, what the registry serves
"""
