// SIMT GEMM for fp32 (exact) and fp64: 2-D register tiling, warp tiling, vectorised loads, double-buffered shared
// memory.
//
// A block computes a BLOCK_M x BLOCK_N tile of C; its warps form a (BLOCK_M/WARP_M) x (BLOCK_N/WARP_N) grid. Inside a
// warp the 32 lanes form a 4 x 8 grid, and each lane computes a 4 x 4 piece of every 16 x 32 sub-tile of the warp
// tile, so a lane holds (WARP_M/16·4) x (WARP_N/32·4) accumulators: C_lane += a_column ⊗ b_row for each k.
//
// Shared memory holds A transposed (A_s[k][m]) and B as B_s[k][n], so that a lane reads its 4 values of a column of
// A and of a row of B as single vector loads. Main loop over BLOCK_K steps, two shared buffers:
//   fetch step kt+1 from global memory into registers; multiply step kt out of buffer kt%2;
//   store the registers into buffer (kt+1)%2; barrier.
#pragma once

#include "gemm_common.cuh"

namespace tracea {

template <class T_, Layout LAYOUT_, Epilogue EPILOGUE_, int BLOCK_M_, int BLOCK_N_, int BLOCK_K_, int WARP_M_, int WARP_N_,
          int VEC_, int SPLIT_K_, int GROUP_M_>
struct SimtGemm {
  using T = T_;
  static constexpr Layout LAYOUT = LAYOUT_;
  static constexpr Epilogue EPILOGUE = EPILOGUE_;
  static constexpr int BLOCK_M = BLOCK_M_, BLOCK_N = BLOCK_N_, BLOCK_K = BLOCK_K_;
  static constexpr int WARP_M = WARP_M_, WARP_N = WARP_N_;
  static constexpr int VEC = VEC_, SPLIT_K = SPLIT_K_, GROUP_M = GROUP_M_;

  static constexpr int WARPS_M = BLOCK_M / WARP_M, WARPS_N = BLOCK_N / WARP_N;
  static constexpr int THREADS = WARPS_M * WARPS_N * 32;
  static constexpr int LANES_M = 4, LANES_N = 8, LANE_M = 4, LANE_N = 4;  // lane grid, and each lane's piece
  static constexpr int SUB_M = WARP_M / (LANES_M * LANE_M), SUB_N = WARP_N / (LANES_N * LANE_N);
  static constexpr int ROWS = SUB_M * LANE_M, COLS = SUB_N * LANE_N;  // accumulators per lane

  // Rows padded by 4 elements: keeps 4-element reads aligned and spreads the transposed stores over the banks.
  static constexpr int LDA_S = BLOCK_M + 4, LDB_S = BLOCK_N + 4;
  static constexpr int BUFFER = BLOCK_K * (LDA_S + LDB_S);
  static constexpr int SMEM_BYTES = 2 * BUFFER * int(sizeof(T));

  // Global -> register staging: VEC elements per load, along K for A (and for B in layout nt), along N for B in nn.
  static constexpr int CHUNKS_A = BLOCK_M * BLOCK_K / VEC, LOADS_A = ceil_div(CHUNKS_A, THREADS);
  static constexpr int CHUNKS_B = BLOCK_K * BLOCK_N / VEC, LOADS_B = ceil_div(CHUNKS_B, THREADS);

  static_assert(BLOCK_M % WARP_M == 0 && BLOCK_N % WARP_N == 0, "warp tiles must divide the block tile");
  static_assert(WARP_M % 16 == 0 && WARP_N % 32 == 0, "a warp tile is made of 16 x 32 sub-tiles");
  static_assert(BLOCK_K % VEC == 0 && BLOCK_N % VEC == 0 && VEC * sizeof(T) <= 16, "bad vector width");
  static_assert(SPLIT_K == 1 || sizeof(T) == 4, "the split-K workspace is fp32: fp64 does not split K");
};

// Loads N consecutive elements of shared memory into registers, as one vector load (two for four doubles).
template <class T, int N> __device__ __forceinline__ void load_run(T (&dst)[N], const T *src) {
  if constexpr (N * sizeof(T) <= 16) {
    const Vec<T, N> v = *reinterpret_cast<const Vec<T, N> *>(src);
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = v.v[i];
  } else {  // four doubles: two 16-byte loads
    const Vec<T, N / 2> lo = *reinterpret_cast<const Vec<T, N / 2> *>(src);
    const Vec<T, N / 2> hi = *reinterpret_cast<const Vec<T, N / 2> *>(src + N / 2);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) dst[i] = lo.v[i], dst[N / 2 + i] = hi.v[i];
  }
}

template <class G> __device__ void gemm_simt(const GemmArgs &args) {
  using T = typename G::T;
  using V = Vec<T, G::VEC>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T *smem = reinterpret_cast<T *>(smem_raw);
  const T *A = static_cast<const T *>(args.a);
  const T *B = static_cast<const T *>(args.b);

  const int2 tile = tile_coords(blockIdx.x, ceil_div(args.m, G::BLOCK_M), ceil_div(args.n, G::BLOCK_N), G::GROUP_M);
  const int m0 = tile.x * G::BLOCK_M, n0 = tile.y * G::BLOCK_N;
  const KSlice slice = k_slice<G::BLOCK_K, G::SPLIT_K>(args.k, blockIdx.z);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm0 = (warp % G::WARPS_M) * G::WARP_M, wn0 = (warp / G::WARPS_M) * G::WARP_N;
  const int lm = lane / G::LANES_N, ln = lane % G::LANES_N;

  T acc[G::ROWS][G::COLS];
#pragma unroll
  for (int i = 0; i < G::ROWS; ++i)
#pragma unroll
    for (int j = 0; j < G::COLS; ++j) acc[i][j] = T(0);

  V ra[G::LOADS_A], rb[G::LOADS_B];

  // Reads VEC elements at (r, col) of a row-major matrix, zeros outside [0, row_end) x [0, col_end).
  auto read = [](const T *src, int ld, int r, int col, int row_end, int col_end) {
    V v;
    if (r < row_end && col < col_end) {
      if constexpr (G::VEC == 1) {
        v.v[0] = src[static_cast<size_t>(r) * ld + col];
      } else {  // col_end is a multiple of VEC (the space checks the shape's alignment)
        v = *reinterpret_cast<const V *>(src + static_cast<size_t>(r) * ld + col);
      }
    } else {
#pragma unroll
      for (int e = 0; e < G::VEC; ++e) v.v[e] = T(0);
    }
    return v;
  };

  auto fetch = [&](int kt) {
    const int k0 = slice.begin + kt * G::BLOCK_K;
    constexpr int A_PER_ROW = G::BLOCK_K / G::VEC;
#pragma unroll
    for (int i = 0; i < G::LOADS_A; ++i) {
      const int chunk = tid + i * G::THREADS;
      if (chunk < G::CHUNKS_A)
        ra[i] = read(A, args.lda, m0 + chunk / A_PER_ROW, k0 + (chunk % A_PER_ROW) * G::VEC, args.m, slice.end);
    }
#pragma unroll
    for (int i = 0; i < G::LOADS_B; ++i) {
      const int chunk = tid + i * G::THREADS;
      if (chunk >= G::CHUNKS_B) continue;
      if constexpr (G::LAYOUT == Layout::NN) {
        constexpr int PER_ROW = G::BLOCK_N / G::VEC;
        rb[i] = read(B, args.ldb, k0 + chunk / PER_ROW, n0 + (chunk % PER_ROW) * G::VEC, slice.end, args.n);
      } else {
        constexpr int PER_ROW = G::BLOCK_K / G::VEC;
        rb[i] = read(B, args.ldb, n0 + chunk / PER_ROW, k0 + (chunk % PER_ROW) * G::VEC, args.n, slice.end);
      }
    }
  };

  auto stash = [&](int buf) {
    T *sa = smem + buf * G::BUFFER, *sb = sa + G::BLOCK_K * G::LDA_S;
    constexpr int A_PER_ROW = G::BLOCK_K / G::VEC;
#pragma unroll
    for (int i = 0; i < G::LOADS_A; ++i) {
      const int chunk = tid + i * G::THREADS;
      if (chunk >= G::CHUNKS_A) continue;
      const int m = chunk / A_PER_ROW, k = (chunk % A_PER_ROW) * G::VEC;
#pragma unroll
      for (int e = 0; e < G::VEC; ++e) sa[(k + e) * G::LDA_S + m] = ra[i].v[e];  // transposed: A_s[k][m]
    }
#pragma unroll
    for (int i = 0; i < G::LOADS_B; ++i) {
      const int chunk = tid + i * G::THREADS;
      if (chunk >= G::CHUNKS_B) continue;
      if constexpr (G::LAYOUT == Layout::NN) {
        constexpr int PER_ROW = G::BLOCK_N / G::VEC;
        *reinterpret_cast<V *>(sb + (chunk / PER_ROW) * G::LDB_S + (chunk % PER_ROW) * G::VEC) = rb[i];
      } else {
        constexpr int PER_ROW = G::BLOCK_K / G::VEC;
        const int n = chunk / PER_ROW, k = (chunk % PER_ROW) * G::VEC;
#pragma unroll
        for (int e = 0; e < G::VEC; ++e) sb[(k + e) * G::LDB_S + n] = rb[i].v[e];  // transposed: B_s[k][n]
      }
    }
  };

  auto multiply = [&](int buf) {
    const T *sa = smem + buf * G::BUFFER, *sb = sa + G::BLOCK_K * G::LDA_S;
#pragma unroll
    for (int k = 0; k < G::BLOCK_K; ++k) {
      T a[G::ROWS], b[G::COLS];
#pragma unroll
      for (int s = 0; s < G::SUB_M; ++s) {
        T piece[G::LANE_M];
        load_run(piece, sa + k * G::LDA_S + wm0 + s * (G::LANES_M * G::LANE_M) + lm * G::LANE_M);
#pragma unroll
        for (int e = 0; e < G::LANE_M; ++e) a[s * G::LANE_M + e] = piece[e];
      }
#pragma unroll
      for (int s = 0; s < G::SUB_N; ++s) {
        T piece[G::LANE_N];
        load_run(piece, sb + k * G::LDB_S + wn0 + s * (G::LANES_N * G::LANE_N) + ln * G::LANE_N);
#pragma unroll
        for (int e = 0; e < G::LANE_N; ++e) b[s * G::LANE_N + e] = piece[e];
      }
#pragma unroll
      for (int i = 0; i < G::ROWS; ++i)
#pragma unroll
        for (int j = 0; j < G::COLS; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
  };

  if (slice.tiles > 0) {
    fetch(0);
    stash(0);
  }
  __syncthreads();
  for (int kt = 0; kt < slice.tiles; ++kt) {
    const bool more = kt + 1 < slice.tiles;
    if (more) fetch(kt + 1);  // in flight while this step multiplies
    multiply(kt % 2);
    if (more) stash((kt + 1) % 2);
    __syncthreads();
  }

  // Lane piece (i, j) of sub-tile (s, u) is C(wm0 + 16 s + 4 lm + i, wn0 + 32 u + 4 ln + j).
#pragma unroll
  for (int i = 0; i < G::ROWS; ++i) {
    const int row = m0 + wm0 + (i / G::LANE_M) * (G::LANES_M * G::LANE_M) + lm * G::LANE_M + i % G::LANE_M;
    if (row >= args.m) continue;
#pragma unroll
    for (int u = 0; u < G::SUB_N; ++u) {
      T piece[G::LANE_N];
#pragma unroll
      for (int j = 0; j < G::LANE_N; ++j) piece[j] = acc[i][u * G::LANE_N + j];
      store_row<G::EPILOGUE, T, G::LANE_N, (G::SPLIT_K > 1)>(args, row, n0 + wn0 + u * (G::LANES_N * G::LANE_N) + ln * G::LANE_N,
                                                             piece);
    }
  }
}

}  // namespace tracea
