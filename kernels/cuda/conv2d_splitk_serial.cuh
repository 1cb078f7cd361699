// Serial split-K for the implicit-GEMM conv2d kernels: the reduction's slices summed and finished in ONE launch.
//
// The main kernel's grid is (output tiles) x 1 x SPLIT_K, as in the three-step plan (workspace memset, main kernel,
// conv2d_splitk_reduce), and each (tile, slice) block adds its fp32 partial tile into the workspace the same way
// (atomicAdd, store_row's split path). Then, instead of a second launch:
//   1. every thread fences its adds (__threadfence) and the block meets (__syncthreads);
//   2. thread 0 increments the tile's arrival counter (atomicAdd on an int after the sums);
//   3. the block that arrives last (it read SPLIT_K − 1) fences again, reads the summed tile from L2 (__ldcg: the
//      adds went to L2, never to this SM's L1), applies the fused epilogue (bias, activation, residual), writes Y,
//      stores zero over its tile of the workspace and resets the counter to zero.
// So the workspace (sums and counters) is all zero after every call: it is zeroed once, when it is allocated (the
// launch plan's `MemsetStep(once=True)`, docs/conv2d.md), never per call. No block waits for another (a last-arriver
// counter, not a spinning semaphore), so nothing depends on which blocks are resident at once.
//
// Two ways to hold the sums (ORDERED):
//   false ("serial")          one M x N fp32 sum that every slice adds into: the adds land in whatever order the
//                             blocks run, so, as with the three-step plan, results can differ in the last bits from
//                             run to run (fp32 addition is not associative). Workspace: [0, 4·M·N) the sums, then one
//                             int per output tile by blockIdx.x (ceil(M / BLOCK_M)·ceil(N / BLOCK_N) <= M·N ints, so
//                             8 bytes per output element hold both).
//   true ("serial_ordered")   one M x N fp32 part per slice: slice z's block is the only one adding into part z (0 + x
//                             is x exactly), and the last block sums the parts in slice order 0, 1, ..., SPLIT_K − 1:
//                             the same bits on every run. Workspace: 4·SPLIT_K bytes per output element, then the
//                             counters (4 more per element).
#pragma once

#include "conv2d_implicit.cuh"

namespace tracea {

#ifdef TRACEA_HOST_EMULATION
#define TRACEA_LOAD_L2(p) (*(p))
#define TRACEA_STORE_L2(p, v) (*(p) = (v))
#else
#define TRACEA_LOAD_L2(p) __ldcg(p)
#define TRACEA_STORE_L2(p, v) __stcg((p), (v))
#endif

// The sums of slice z (ORDERED) or of all slices: where a block adds its partial tile.
template <bool ORDERED> __device__ __forceinline__ float *slice_sums(float *workspace, int m, int n, int z) {
  return ORDERED ? workspace + static_cast<size_t>(z) * m * n : workspace;
}

// After a block's partial tile is in the workspace: the last of the tile's SPLIT_K blocks finishes the tile.
template <class G, class Geo, bool ORDERED> __device__ __forceinline__ void conv2d_splitk_serial_finish(const ConvArgs &args) {
  using T = typename G::T;
  static_assert(G::SPLIT_K > 1, "serial split-K sums slices: SPLIT_K > 1");
  constexpr int PARTS = ORDERED ? G::SPLIT_K : 1;
  const GemmArgs out = ConvShape::output<Geo>(args);
  const size_t mn = static_cast<size_t>(out.m) * out.n;
  const int2 tile = tile_coords(blockIdx.x, ceil_div(out.m, G::BLOCK_M), ceil_div(out.n, G::BLOCK_N), G::GROUP_M);
  const int m0 = tile.x * G::BLOCK_M, n0 = tile.y * G::BLOCK_N;
  int *counter = reinterpret_cast<int *>(out.workspace + PARTS * mn) + blockIdx.x;

  __threadfence();  // this thread's adds are visible device-wide before the block's arrival is
  __syncthreads();
  int last = 0;
  if (threadIdx.x == 0) last = atomicAdd(counter, 1) == G::SPLIT_K - 1;
  if (!__syncthreads_or(last)) return;
  __threadfence();  // the other slices' adds, seen through their arrivals, before the reads below

  const int rows = min(G::BLOCK_M, out.m - m0), cols = min(G::BLOCK_N, out.n - n0);
  for (int i = threadIdx.x; i < rows * G::BLOCK_N; i += G::THREADS) {
    const int r = i / G::BLOCK_N, c = i % G::BLOCK_N;
    if (c >= cols) continue;
    const int row = m0 + r, col = n0 + c;
    float *sum = out.workspace + static_cast<size_t>(row) * out.n + col;
    float total = 0.0f;
#pragma unroll
    for (int z = 0; z < PARTS; ++z) {  // in slice order
      total += TRACEA_LOAD_L2(sum + z * mn);
      TRACEA_STORE_L2(sum + z * mn, 0.0f);  // left zero for the next call
    }
    static_cast<T *>(out.c)[static_cast<size_t>(row) * out.ldc + col] =
        finish<G::EPILOGUE, T>(static_cast<typename Element<T>::Acc>(total), out, row, col);
  }
  if (threadIdx.x == 0) *counter = 0;  // every slice of this tile has arrived: no block reads it again this launch
}

// A ConvArgs whose workspace is where this block adds its partial tile.
template <class Geo, bool ORDERED> __device__ __forceinline__ ConvArgs slice_args(const ConvArgs &args) {
  ConvArgs a = args;
  if constexpr (ORDERED) {
    const GemmArgs out = ConvShape::output<Geo>(args);
    a.workspace = slice_sums<true>(args.workspace, out.m, out.n, blockIdx.z);
  }
  return a;
}

template <class G, class Geo, ConvIterator ITER, bool ORDERED = false>
__device__ void conv2d_mma_serial(const ConvArgs &args) {
  conv2d_mma<G, Geo, ITER>(slice_args<Geo, ORDERED>(args));  // SPLIT_K > 1: adds the block's partial tile
  conv2d_splitk_serial_finish<G, Geo, ORDERED>(args);
}

template <class G, class Geo, ConvIterator ITER, bool ORDERED = false>
__device__ void conv2d_simt_serial(const ConvArgs &args) {
  conv2d_simt<G, Geo, ITER>(slice_args<Geo, ORDERED>(args));
  conv2d_splitk_serial_finish<G, Geo, ORDERED>(args);
}

}  // namespace tracea
