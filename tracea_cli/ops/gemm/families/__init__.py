"""GEMM's kernel families (ops/base.Family), each with its space beside it: `wgmma` (Hopper: wgmma + TMA, sm_90a),
`engine` (the SIMT and mma.sync templates, Ampere-style), `numba` (the CPU). `ops/gemm/op.py` lists them."""
