// SIMT GEMM for fp32 (exact) and fp64: 2-D register tiling, warp tiling, vectorised loads, double-buffered shared
// memory, double-buffered fragments.
//
// A block computes a BLOCK_M x BLOCK_N tile of C; its warps form a (BLOCK_M/WARP_M) x (BLOCK_N/WARP_N) grid. Inside a
// warp the 32 lanes form a 4 x 8 grid (8 x 4 for warp tiles taller than wide), and each lane computes a 4 x 4 piece
// of every 16 x 32 (32 x 16) sub-tile of the warp tile: C_lane += a_column ⊗ b_row for each k.
//
// Shared memory holds A transposed (A_s[k][m]) and B as B_s[k][n], so that a lane reads its 4 values of a column of
// A and of a row of B as single vector loads. Main loop over BLOCK_K steps, two shared buffers, one barrier a step:
//   fetch step kt+1 from global memory into registers; multiply step kt out of buffer kt%2, loading the fragments of
//   k+1 while k multiplies (PREFETCH); before the last k, store the registers into buffer (kt+1)%2, barrier, and load
//   the first fragments of step kt+1, so that they arrive under the last k's products.
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
  // Lane grid and each lane's piece: 4 x 8 lanes (16 x 32 sub-tiles), or 8 x 4 lanes (32 x 16) for warp tiles taller
  // than wide, so that a 64 x 32 warp tile gives each lane 8 x 8 accumulators as a 32 x 64 one does.
  static constexpr int LANES_M = WARP_M > WARP_N ? 8 : 4, LANES_N = 32 / LANES_M, LANE_M = 4, LANE_N = 4;
  static constexpr int SUB_M = WARP_M / (LANES_M * LANE_M), SUB_N = WARP_N / (LANES_N * LANE_N);
  static constexpr int ROWS = SUB_M * LANE_M, COLS = SUB_N * LANE_N;  // accumulators per lane

  static constexpr int ACC_REGS = ROWS * COLS * int(sizeof(T) / 4), FRAGMENT_REGS = (ROWS + COLS) * int(sizeof(T) / 4);

  // Fragments of the next k load from shared memory while this k multiplies (two sets of fragment registers), unless
  // accumulators and both sets would leave fewer than 80 of a thread's 255 registers for the rest (fp64 32 x 64 warp
  // tiles: 128 + 2 x 32).
  static constexpr bool PREFETCH = ACC_REGS + 2 * FRAGMENT_REGS <= 176;

  // Global -> register staging: VEC elements per load, along K for A (and for B in layout nt), along N for B in nn.
  static constexpr int CHUNKS_A = BLOCK_M * BLOCK_K / VEC, LOADS_A = ceil_div(CHUNKS_A, THREADS);
  static constexpr int CHUNKS_B = BLOCK_K * BLOCK_N / VEC, LOADS_B = ceil_div(CHUNKS_B, THREADS);
  // Whether load `chunk` (tid + i·THREADS) exists: always, when the loads divide evenly among the threads.
  static __device__ __forceinline__ bool has_chunk_a(int chunk) { return CHUNKS_A % THREADS == 0 || chunk < CHUNKS_A; }
  static __device__ __forceinline__ bool has_chunk_b(int chunk) { return CHUNKS_B % THREADS == 0 || chunk < CHUNKS_B; }
  static constexpr int STAGING_REGS = (LOADS_A + LOADS_B) * VEC * int(sizeof(T) / 4);

  // Blocks per SM promised to ptxas (__launch_bounds__' second argument): enough for 16 resident warps, which caps a
  // thread at 128 registers, for fp32 tiles whose accumulators, fragments and staging take at most 104 of them (the
  // 24 left hold addresses and counters: 128 x 128 x 8 tiles with 8 x 8 per lane, 104, fit in 126 registers without
  // spilling; with BLOCK_K = 16, 112, ptxas spilled). Else no promise (1).
  static constexpr int RESIDENT_WARPS = 16;
  static constexpr bool FITS_128_REGS = ACC_REGS + (PREFETCH ? 2 : 1) * FRAGMENT_REGS + STAGING_REGS <= 104;
  static constexpr int MIN_BLOCKS =
      sizeof(T) == 4 && FITS_128_REGS && THREADS < RESIDENT_WARPS * 32 ? RESIDENT_WARPS * 32 / THREADS : 1;

  // Rows padded by 4 elements: keeps 4-element reads aligned and spreads the transposed stores over the banks.
  static constexpr int LDA_S = BLOCK_M + 4, LDB_S = BLOCK_N + 4;
  static constexpr int BUFFER = BLOCK_K * (LDA_S + LDB_S);
  static constexpr int SMEM_BYTES = 2 * BUFFER * int(sizeof(T));

  static_assert(BLOCK_M % WARP_M == 0 && BLOCK_N % WARP_N == 0, "warp tiles must divide the block tile");
  static_assert(WARP_M % (LANES_M * LANE_M) == 0 && WARP_N % (LANES_N * LANE_N) == 0,
                "a warp tile is made of whole sub-tiles");
  static_assert(BLOCK_K % VEC == 0 && BLOCK_N % VEC == 0 && VEC * sizeof(T) <= 16, "bad vector width");
  static_assert(!PREFETCH || BLOCK_K % 2 == 0, "the fragment sets alternate: the next step's first k is set 0");
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

  // This thread's global loads, planned once: the element each reads in the next step, its offset along K inside a
  // step, and whether it lies inside the matrix across K (then each step checks only K against the slice's end).
  constexpr int A_PER_ROW = G::BLOCK_K / G::VEC;
  constexpr int B_PER_ROW = G::LAYOUT == Layout::NN ? G::BLOCK_N / G::VEC : G::BLOCK_K / G::VEC;
  const T *a_src[G::LOADS_A], *b_src[G::LOADS_B];
  int a_k[G::LOADS_A], b_k[G::LOADS_B];
  bool a_in[G::LOADS_A], b_in[G::LOADS_B];
#pragma unroll
  for (int i = 0; i < G::LOADS_A; ++i) {
    const int chunk = tid + i * G::THREADS, row = m0 + chunk / A_PER_ROW;
    a_k[i] = (chunk % A_PER_ROW) * G::VEC;
    a_in[i] = G::has_chunk_a(chunk) && row < args.m;
    a_src[i] = A + static_cast<size_t>(a_in[i] ? row : 0) * args.lda + slice.begin + a_k[i];
  }
#pragma unroll
  for (int i = 0; i < G::LOADS_B; ++i) {
    const int chunk = tid + i * G::THREADS;
    if constexpr (G::LAYOUT == Layout::NN) {  // B_s[k][n] = B[k][n]: the column is fixed, the row is k
      const int col = n0 + (chunk % B_PER_ROW) * G::VEC;
      b_k[i] = chunk / B_PER_ROW;
      b_in[i] = G::has_chunk_b(chunk) && col < args.n;
      b_src[i] = B + static_cast<size_t>(slice.begin + b_k[i]) * args.ldb + (b_in[i] ? col : 0);
    } else {  // B_s[k][n] = B[n][k]: the row is fixed, k runs along it
      const int row = n0 + chunk / B_PER_ROW;
      b_k[i] = (chunk % B_PER_ROW) * G::VEC;
      b_in[i] = G::has_chunk_b(chunk) && row < args.n;
      b_src[i] = B + static_cast<size_t>(b_in[i] ? row : 0) * args.ldb + slice.begin + b_k[i];
    }
  }
  const size_t b_advance = G::LAYOUT == Layout::NN ? static_cast<size_t>(G::BLOCK_K) * args.ldb : G::BLOCK_K;

  V ra[G::LOADS_A], rb[G::LOADS_B];

  // VEC elements from `src`, or zeros when the load lies outside the matrix. K is a multiple of VEC (the space checks
  // the shape's alignment), so a load is wholly inside or wholly outside the slice along K.
  auto read = [](const T *src, bool inside) {
    V v;
#pragma unroll
    for (int e = 0; e < G::VEC; ++e) v.v[e] = T(0);
    if (inside) v = *reinterpret_cast<const V *>(src);
    return v;
  };

  // Global -> registers, `k_left` elements of the slice remaining from this step on; the sources then advance a step.
  auto fetch = [&](int k_left) {
#pragma unroll
    for (int i = 0; i < G::LOADS_A; ++i) {
      ra[i] = read(a_src[i], a_in[i] && a_k[i] < k_left);
      a_src[i] += G::BLOCK_K;
    }
#pragma unroll
    for (int i = 0; i < G::LOADS_B; ++i) {
      rb[i] = read(b_src[i], b_in[i] && b_k[i] < k_left);
      b_src[i] += b_advance;
    }
  };

  // Registers -> the shared buffer at `buf` (an element offset, 0 or BUFFER).
  auto stash = [&](int buf) {
    T *sa = smem + buf, *sb = sa + G::BLOCK_K * G::LDA_S;
#pragma unroll
    for (int i = 0; i < G::LOADS_A; ++i) {
      const int chunk = tid + i * G::THREADS;
      if (!G::has_chunk_a(chunk)) continue;
      const int m = chunk / A_PER_ROW, k = a_k[i];
#pragma unroll
      for (int e = 0; e < G::VEC; ++e) sa[(k + e) * G::LDA_S + m] = ra[i].v[e];  // transposed: A_s[k][m]
    }
#pragma unroll
    for (int i = 0; i < G::LOADS_B; ++i) {
      const int chunk = tid + i * G::THREADS;
      if (!G::has_chunk_b(chunk)) continue;
      if constexpr (G::LAYOUT == Layout::NN) {
        *reinterpret_cast<V *>(sb + b_k[i] * G::LDB_S + (chunk % B_PER_ROW) * G::VEC) = rb[i];
      } else {
        const int n = chunk / B_PER_ROW, k = b_k[i];
#pragma unroll
        for (int e = 0; e < G::VEC; ++e) sb[(k + e) * G::LDB_S + n] = rb[i].v[e];  // transposed: B_s[k][n]
      }
    }
  };

  // The fragments of one k: this lane's column of A (ROWS values) and row of B (COLS values). With PREFETCH two sets,
  // so that the next k's loads from shared memory are in flight while this k's products run.
  constexpr int SETS = G::PREFETCH ? 2 : 1;
  T a[SETS][G::ROWS], b[SETS][G::COLS];
  const T *frag_a = smem + wm0 + lm * G::LANE_M, *frag_b = smem + G::BLOCK_K * G::LDA_S + wn0 + ln * G::LANE_N;

  auto load_fragments = [&](int slot, int buf, int k) {
#pragma unroll
    for (int s = 0; s < G::SUB_M; ++s) {
      T piece[G::LANE_M];
      load_run(piece, frag_a + buf + k * G::LDA_S + s * (G::LANES_M * G::LANE_M));
#pragma unroll
      for (int e = 0; e < G::LANE_M; ++e) a[slot][s * G::LANE_M + e] = piece[e];
    }
#pragma unroll
    for (int s = 0; s < G::SUB_N; ++s) {
      T piece[G::LANE_N];
      load_run(piece, frag_b + buf + k * G::LDB_S + s * (G::LANES_N * G::LANE_N));
#pragma unroll
      for (int e = 0; e < G::LANE_N; ++e) b[slot][s * G::LANE_N + e] = piece[e];
    }
  };

  auto multiply = [&](int slot) {
#pragma unroll
    for (int i = 0; i < G::ROWS; ++i)
#pragma unroll
      for (int j = 0; j < G::COLS; ++j) acc[i][j] = fma(a[slot][i], b[slot][j], acc[i][j]);
  };

  const int k_len = slice.end - slice.begin;
  if (slice.tiles > 0) {
    fetch(k_len);
    stash(0);
  }
  __syncthreads();
  if constexpr (G::PREFETCH) load_fragments(0, 0, 0);
  int buf = 0;  // the buffer this step reads; the next step's tile goes into the other
  for (int kt = 0; kt < slice.tiles; ++kt) {
    const int other = G::BUFFER - buf;
    const bool more = kt + 1 < slice.tiles;
    if (more) fetch(k_len - (kt + 1) * G::BLOCK_K);  // in flight while this step multiplies
#pragma unroll
    for (int k = 0; k < G::BLOCK_K; ++k) {
      if constexpr (G::PREFETCH) {
        const int next = (k + 1) % 2;  // BLOCK_K is even: the next step's k = 0 lands in set 0
        if (k + 1 < G::BLOCK_K) {
          load_fragments(next, buf, k + 1);
        } else {
          // Last k: the next step's tile goes into the other buffer (free: every warp passed the previous barrier
          // after its last read of it), one barrier, and the next step's first fragments load under these products.
          if (more) stash(other);
          __syncthreads();
          load_fragments(next, other, 0);
        }
        multiply(k % 2);
      } else {
        load_fragments(0, buf, k);
        multiply(0);
        if (k + 1 == G::BLOCK_K) {
          if (more) stash(other);
          __syncthreads();
        }
      }
    }
    buf = other;
  }

  // Lane piece (i, j) of sub-tile (s, u) is C(wm0 + s·LANES_M·4 + 4 lm + i, wn0 + u·LANES_N·4 + 4 ln + j).
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
