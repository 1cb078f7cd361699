"""attention\x27s part of the exported ABI (abi.py, tracea_attention.h, example.cpp)."""
