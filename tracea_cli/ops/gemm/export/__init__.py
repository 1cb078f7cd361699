"""GEMM's exported ABI: abi.py, and the C/C++ texts it fills in (tracea_gemm.h, example.cpp)."""
