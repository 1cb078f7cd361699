// conv2d's additions to the Hopper GEMM kernel (gemm_wgmma.cuh), for convolutions that are a GEMM (1x1, stride 1,
// no padding or dilation: Y[N*H*W, K] = X[N*H*W, C] * W[K, C]^T, the GEMM layout nt).
//
// Only conv2d's translation unit includes this file (tracea_cli/ops/conv2d/families/wgmma.py): the GEMM op's sources,
// and so its cache keys, do not change. conv2d's generator pastes one line into the GEMM kernel's epilogue, after the
// residual is added and before the pair is stored:
//     WG_CONV_AFTER_RESIDUAL(v0, v1);
// and defines
//   WG_POST_RELU  1: ReLU after the residual (conv2d's bias_residual_relu, with WG_EPILOGUE 5 = bias + residual)
#pragma once

#ifndef WG_POST_RELU
#define WG_POST_RELU 0
#endif

#if WG_POST_RELU
#define WG_CONV_AFTER_RESIDUAL(v0, v1) \
  do {                                 \
    v0 = fmaxf(v0, 0.0f);              \
    v1 = fmaxf(v1, 0.0f);              \
  } while (0)
#else
#define WG_CONV_AFTER_RESIDUAL(v0, v1) \
  do {                                 \
  } while (0)
#endif
