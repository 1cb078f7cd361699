// Split-K's second pass for the Hopper GEMM family (gemm_wgmma.cuh with WG_SPLIT_K > 1; empty otherwise): the K
// slices have added their raw sums into the fp32 workspace (M x N, leading dimension N); this kernel applies the
// epilogue (bias, activation, residual: the main kernel's, in the same order), writes C and sets each workspace
// element back to zero, so that the workspace is zero again for the next call (the plan's memset runs only when the
// workspace is allocated; docs/kernel-abi.md, "Split-K").
//   gemm_wgmma_splitk(float* workspace, elem_t* C, const elem_t* bias, const elem_t* residual, int M, int N, int ldc)
// One thread per element of C, blocks of WG_SPLITK_THREADS, grid ceil(M*N / WG_SPLITK_THREADS).
#pragma once

#if WG_SPLIT_K > 1

#define WG_SPLITK_THREADS 256

extern "C" __global__ void __launch_bounds__(WG_SPLITK_THREADS)
    gemm_wgmma_splitk(float* __restrict__ workspace, wg::elem_t* __restrict__ C, const wg::elem_t* __restrict__ bias,
                      const wg::elem_t* __restrict__ residual, int M, int N, int ldc) {
  using namespace wg;
  const long long i = static_cast<long long>(blockIdx.x) * WG_SPLITK_THREADS + threadIdx.x;
  if (i >= static_cast<long long>(M) * N) return;
  const int row = static_cast<int>(i / N), col = static_cast<int>(i - static_cast<long long>(row) * N);
  const long long at = static_cast<long long>(row) * ldc + col;
  float v = workspace[i];
  workspace[i] = 0.0f;
#if WG_EPILOGUE >= 1
  v = activation(v + to_float(bias[col]));
#endif
#if WG_EPILOGUE == 5
  v += to_float(residual[at]);
#endif
  C[at] = to_elem(v);
}

#endif  // WG_SPLIT_K > 1
