// The last-arriver step of serial split-K, for any kernel whose SPLIT_K slices of one output tile each leave their
// partial sums in global memory and then call it once per block (all of the block's threads):
//   1. every thread fences its stores (__threadfence) and the block meets (__syncthreads);
//   2. thread 0 increments the tile's arrival counter (an int atomicAdd, after the sums);
//   3. the block that read SPLIT_K − 1 (it arrived last) is told so, every one of its threads, and fences again, so
//      that the other slices' sums, seen through their arrivals, are read after it (through L2: `load_l2`).
// No block waits for another (a counter read once, not a spinning semaphore), so nothing depends on which blocks are
// resident at once. The caller finishes the tile and sets the counter back to zero (`release_arrival`): a workspace
// whose counters start at zero (zeroed once, when it is allocated) is left so after every call.
//
// Used by the GEMV kernel's one-launch split-K (gemm_gemv_serial.cuh). The conv2d kernels' serial split-K
// (conv2d_splitk_serial.cuh) has the same steps written out in its own text: moving it onto this header would change
// its generated source, and so its configurations' cache keys.
#pragma once

#include "gemm_common.cuh"

namespace tracea {

// Reads a value other blocks stored, from L2 (their stores never went to this SM's L1).
__device__ __forceinline__ float load_l2(const float *p) {
#ifdef TRACEA_HOST_EMULATION
  return *p;
#else
  return __ldcg(p);
#endif
}

// Whether this block is the last of the tile's `slices` blocks to arrive at `counter` (steps 1 to 3 above).
__device__ __forceinline__ bool last_arrival(int *counter, int slices) {
  __threadfence();  // this thread's sums are visible device-wide before the block's arrival is
  __syncthreads();
  int last = 0;
  if (threadIdx.x == 0) last = atomicAdd(counter, 1) == slices - 1;
  if (!__syncthreads_or(last)) return false;
  __threadfence();  // the other slices' sums, seen through their arrivals, before the last block's reads
  return true;
}

// The last block, once its tile is finished: the counter back to zero for the next call (every slice of the tile
// has arrived, so no block of this launch reads it again).
__device__ __forceinline__ void release_arrival(int *counter) {
  if (threadIdx.x == 0) *counter = 0;
}

}  // namespace tracea
