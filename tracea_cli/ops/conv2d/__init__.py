"""conv2d: forward 2-D convolution (cross-correlation, as torch) as an implicit GEMM, NHWC activations, KRSC filters,
NPQK output, with a fused epilogue. ops/conv2d/op.py is what the registry serves."""
