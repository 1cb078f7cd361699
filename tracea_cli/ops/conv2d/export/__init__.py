"""conv2d's part of the exported ABI: abi.py, the op header tracea_conv2d.h and the example program."""
