"""lowrank-mlp's part of the exported ABI: abi.py (slots, prefix functions, example), tracea_lowrank_mlp.h (the op's
C/C++ API), example.cpp."""
