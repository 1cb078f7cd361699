// conv2d on the Hopper GEMM pipeline for general convolutions (stride, padding, dilation, any R x S): the activation
// through TMA im2col loads, the filter through a 3-D tiled map, the GEMM kernel's wgmma consumer unchanged.
//
// Included by conv2d's translation unit after gemm_wgmma.cuh (whose own entry point is left out of that unit), with
//   WG_CONV_R, WG_CONV_S            the filter                       WG_B_KMAJOR 1 (the filter is K_out x R*S*C)
// The implicit GEMM: row m = output pixel (n, p, q) = ((n*P + p)*Q + q); k-step kb = tap (r, s) = kb / c_blocks and
// channels (kb % c_blocks) * kTileK .. + kTileK. Host side (maps, starts, offsets, checked on the CPU against a direct
// enumeration): tracea_cli/ops/conv2d/families/wgmma_im2col.py.
//   map_x  im2col over X (C, W, H, N): bounding box lower = -pad, upper = pad - dilation*(filter - 1), traversal
//          strides (1, stride_w, stride_h, 1), kTileK channels x WG_TILE_M pixels per load, 128-byte swizzle
//   map_w  tiled over the filter as (C, R*S, K_out): box (kTileK, 1, WG_TILE_N / WG_CLUSTER_M), 128-byte swizzle
// A load for tile m0 starts at (c0, q*stride_w - pad_w, p*stride_h - pad_h, n) of output pixel m0 = (n, p, q), with
// im2col offsets (s*dilation_w, r*dilation_h): the box walk visits the tile's output pixels in M's order and the
// offsets move each to tap (r, s); taps outside X, channels past C and pixels past the last image read zeros.
#pragma once

namespace wg {

constexpr int kConvR = WG_CONV_R;
constexpr int kConvS = WG_CONV_S;
static_assert(kBKMajor, "the filter is read K-major (K_out x R*S*C)");

__device__ __forceinline__ void tma_load_im2col(u32 dst, const TensorMap* map, u32 bar, int c, int w, int h, int n,
                                                unsigned short off_w, unsigned short off_h) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2], {%7, %8};" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c), "r"(w), "r"(h), "r"(n), "h"(off_w), "h"(off_h)
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(u32 dst, const TensorMap* map, u32 bar, int c0, int c1, int c2) {
  if (kCluster == 1) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(dst),
        "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
  } else {
    const unsigned short all = (1u << kCluster) - 1;
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(dst),
        "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "h"(all)
        : "memory");
  }
}

struct ConvGeometry {
  int M, P, Q, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, c_blocks;
};

// The producer of gemm_wgmma.cuh's `produce`, with the A tile gathered by im2col and B read per tap.
__device__ __forceinline__ void produce_conv(const Ring& ring, const TensorMap* map_x, const TensorMap* map_w,
                                             const ConvGeometry& g, int work, int first, int stride, int cluster_rows,
                                             int tiles_n, int k_blocks, u32 rank) {
  int slot = 0;
  u32 phase = 0;
  const int pq = g.P * g.Q;
  for (int t = first; t < work; t += stride) {
    const Slice sl = cta_slice(t, work / kSplitK, k_blocks);
    int crow, tn;
    tile_of(sl.item, cluster_rows, tiles_n, crow, tn);
    const int m0 = (crow * kCluster + static_cast<int>(rank)) * kTileM;
    const int n0 = tn * kTileN;
    // The walk's start: output pixel m0 (a tile past the last pixel starts past the last image: zeros).
    const int img = m0 / pq, rest = m0 - img * pq;
    const int p = rest / g.Q, q = rest - p * g.Q;
    const int w0 = q * g.stride_w - g.pad_w, h0 = p * g.stride_h - g.pad_h;
    for (int kb = sl.kb0; kb < sl.kb1; ++kb) {
      const int tap = kb / g.c_blocks;
      const int c0 = (kb - tap * g.c_blocks) * kTileK;
      const int r = tap / kConvS, s = tap - r * kConvS;
      mbar_wait(ring.empty_bar(slot), phase ^ 1);
      const u32 bar = ring.full_bar(slot);
      mbar_expect_tx(bar, kStageBytesA + kStageBytesB);
      tma_load_im2col(ring.a + slot * kStageBytesA, map_x, bar, c0, w0, h0, img,
                      static_cast<unsigned short>(s * g.dilation_w), static_cast<unsigned short>(r * g.dilation_h));
      constexpr int rows = kTileN / kCluster;
      tma_load_3d(ring.b + slot * kStageBytesB + rank * rows * 128, map_w, bar, c0, tap,
                  n0 + static_cast<int>(rank) * rows);
      if (++slot == kStages) {
        slot = 0;
        phase ^= 1;
      }
    }
  }
}

}  // namespace wg

// Y (N*P*Q x K_out, NPQK) = epilogue(im2col(X) * filter^T). M = N*P*Q, N = K_out, C = input channels; ldc = K_out.
extern "C" __global__ void __launch_bounds__(wg::kThreads, 1)
    conv2d_wgmma_im2col(const __grid_constant__ wg::TensorMap map_x, const __grid_constant__ wg::TensorMap map_w,
                        const __grid_constant__ wg::TensorMap map_c, wg::elem_t* __restrict__ Y,
                        const wg::elem_t* __restrict__ bias, const wg::elem_t* __restrict__ residual,
                        float* __restrict__ workspace, int M, int N, int C, int ldc, int P, int Q, int stride_h,
                        int stride_w, int pad_h, int pad_w, int dilation_h, int dilation_w) {
  using namespace wg;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = (raw + 1023) & ~1023u;
  const Ring ring = ring_at(base);

  const ConvGeometry g{M, P, Q, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, (C + kTileK - 1) / kTileK};
  const int tiles_m = (M + kTileM - 1) / kTileM;
  const int tiles_n = (N + kTileN - 1) / kTileN;
  const int cluster_rows = (tiles_m + kCluster - 1) / kCluster;
  const int work = cluster_rows * tiles_n * kSplitK;
  const int k_blocks = kConvR * kConvS * g.c_blocks;
  const u32 rank = cluster_rank();
  const int first = blockIdx.x / kCluster;
  const int stride = WG_PERSISTENT ? gridDim.x / kCluster : work;

  init_ring(ring);

  if (threadIdx.x < 128) {
    if (kConsumers > 1) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0)
      produce_conv(ring, &map_x, &map_w, g, work, first, stride, cluster_rows, tiles_n, k_blocks, rank);
  } else {
    if (kConsumers > 1) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    consume(ring, &map_c, Y, bias, residual, workspace, M, N, ldc, work, first, stride, cluster_rows, tiles_n,
            k_blocks, rank, threadIdx.x / 128 - 1);
  }
  if (kClusterCtas > 1) {
    __syncwarp();
    cluster_sync();
  }
}
