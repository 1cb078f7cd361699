// The GEMV kernel's split-K in one launch (splitk_mode "serial"): gemm_gemv.cuh's main kernel, then, instead of the
// second launch (gemm_splitk_sum), the last of a column block's SPLIT_K slices to arrive sums the slices and finishes
// the block (splitk_arrival.cuh).
//
// Each slice writes its ROWS x BLOCK_N sums to its own M x N part of the workspace, exactly as in the two-launch plan
// (no atomics on the sums). The block that arrives last adds the parts in slice order 0, 1, ..., SPLIT_K − 1 from
// 0.0f, as gemm_splitk_sum does, and applies the epilogue: the same arithmetic, so the same bits as the two-launch
// plan, on every run. Then it sets its counter back to zero.
//
// Workspace (4·(SPLIT_K + 1) bytes per element of C): first one int counter per output tile, by blockIdx.x
// (ceil(M / ROWS)·ceil(N / BLOCK_N) <= M·N of them: the first 4·M·N bytes hold them), then the SPLIT_K parts. Only
// the counters need to start at zero (each slice overwrites all of its part): the launch plan zeroes the first 4·M·N
// bytes once, when the workspace is allocated (MemsetStep(once=True)), and every call leaves them zero.
#pragma once

#include "gemm_gemv.cuh"
#include "splitk_arrival.cuh"

namespace tracea {

template <class G> __device__ void gemm_gemv_serial(const GemmArgs &args) {
  static_assert(G::SPLIT_K > 1, "serial split-K sums slices: SPLIT_K > 1");
  const size_t mn = static_cast<size_t>(args.m) * args.n;
  GemmArgs sliced = args;
  sliced.workspace = args.workspace + mn;  // the parts, after the counters
  gemm_gemv<G>(sliced);                    // SPLIT_K > 1: this slice's sums into its part

  int *counter = reinterpret_cast<int *>(args.workspace) + blockIdx.x;
  if (!last_arrival(counter, G::SPLIT_K)) return;

  const int tiles_n = ceil_div(args.n, G::BLOCK_N);
  const int m0 = (blockIdx.x / tiles_n) * G::ROWS, n0 = (blockIdx.x % tiles_n) * G::BLOCK_N;
  const int rows = min(G::ROWS, args.m - m0), cols = min(G::BLOCK_N, args.n - n0);
  for (int e = threadIdx.x; e < rows * G::BLOCK_N; e += G::THREADS) {
    const int r = e / G::BLOCK_N, c = e % G::BLOCK_N;
    if (c >= cols) continue;
    const int row = m0 + r, column = n0 + c;
    const float *part = sliced.workspace + static_cast<size_t>(row) * args.n + column;
    float sum = 0.0f;
#pragma unroll
    for (int slice = 0; slice < G::SPLIT_K; ++slice) sum += load_l2(part + slice * mn);  // in slice order
    static_cast<typename G::T *>(args.c)[static_cast<size_t>(row) * args.ldc + column] =
        finish<G::EPILOGUE, typename G::T>(sum, args, row, column);
  }
  release_arrival(counter);
}

}  // namespace tracea
