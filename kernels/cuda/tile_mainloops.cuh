// The GEMM engine's main loops and tile stores as functions of where a pipeline step's tiles come from, for kernels
// built on its tiles that load them otherwise (the implicit-GEMM convolution, conv2d_implicit.cuh): the mma.sync
// pipeline of gemm_mma.cuh (MmaGemm traits, fragments, ldmatrix, mma_16x8) and the SIMT loop of gemm_simt.cuh
// (SimtGemm traits, register-tiled FMA), the same steps in the same order as in gemm_mma() and gemm_simt().
//
// gemm_mma() and gemm_simt() keep their own loops for now: their text is what GEMM's tuning caches are keyed on
// (OpBackend.source_hash; tests/cache/test_migration.py holds keys of 0.1.0 current), and a change of it would make
// every cached GEMM result stale. Moving them onto these functions is the next GEMM kernel change's to make.
//
// Also here: the epilogue BiasResidualRelu (conv2d's: a ReLU after the residual), which gemm_common.cuh's enum lacks,
// as the value after BiasResidual with its own `finish`.
#pragma once

#include "gemm_mma.cuh"
#include "gemm_simt.cuh"

namespace tracea {

// ---- BiasResidualRelu -------------------------------------------------------------------------------------------

constexpr Epilogue BIAS_RESIDUAL_RELU = static_cast<Epilogue>(static_cast<int>(Epilogue::BiasResidual) + 1);

// ReLU(acc + bias[col] + residual[row, col]): BiasResidual's value, then the ReLU (it commutes with the rounding to T).
template <class T> __device__ __forceinline__ T finish_residual_relu(typename Element<T>::Acc acc, const GemmArgs &args,
                                                                     int row, int col) {
  const T v = finish<Epilogue::BiasResidual, T>(acc, args, row, col);
  return Element<T>::widen(v) > typename Element<T>::Acc(0) ? v : Element<T>::narrow(typename Element<T>::Acc(0));
}
template <> __device__ __forceinline__ float finish<BIAS_RESIDUAL_RELU, float>(float acc, const GemmArgs &args, int row,
                                                                                int col) {
  return finish_residual_relu<float>(acc, args, row, col);
}
template <> __device__ __forceinline__ __half finish<BIAS_RESIDUAL_RELU, __half>(float acc, const GemmArgs &args, int row,
                                                                                  int col) {
  return finish_residual_relu<__half>(acc, args, row, col);
}
template <>
__device__ __forceinline__ __nv_bfloat16 finish<BIAS_RESIDUAL_RELU, __nv_bfloat16>(float acc, const GemmArgs &args,
                                                                                    int row, int col) {
  return finish_residual_relu<__nv_bfloat16>(acc, args, row, col);
}

// ---- mma.sync ---------------------------------------------------------------------------------------------------

// The mma.sync main loop over `tiles` pipeline steps, gemm_mma.cuh's "Main loop" as a function of where the tiles come
// from: `load_step(kt, sa, sb)` starts copying
// step kt's A and B tiles into the stage at sa and sb (cp.async, or plain stores that are visible after the next
// barrier); the loop commits one group per step. `kk0` is where this warp's K-slice starts in a stage. On return
// every copy has landed and acc holds this warp's sums.
template <class G, class LoadStep>
__device__ __forceinline__ void mma_mainloop(float (&acc)[G::TILES_M][G::TILES_N][4], typename G::T *smem, int tiles,
                                             LoadStep &&load_step, int kk0, int wm0, int wn0, int lane) {
  auto stage_a = [&](int s) { return smem + s * (G::STAGE_A + G::STAGE_B); };
  auto stage_b = [&](int s) { return smem + s * (G::STAGE_A + G::STAGE_B) + G::STAGE_A; };

  // Prologue: steps 0 .. STAGES-2 in flight and step 0 landed (with PREFETCH, its first fragments in registers).
  // Every step commits one group (empty ones too), so "at most STAGES-2 groups pending" means "the next step landed".
#pragma unroll
  for (int s = 0; s < G::STAGES - 1; ++s) {
    if (s < tiles) load_step(s, stage_a(s), stage_b(s));
    cp_async_commit();
  }
  cp_async_wait<G::STAGES - 2>();
  __syncthreads();
  Fragments<G> frag[G::PREFETCH ? 2 : 1];
  if (G::PREFETCH && tiles > 0) load_fragments<G>(frag[0], stage_a(0), stage_b(0), kk0, wm0, wn0, lane);

  int read = 0;  // the stage holding step kt
  for (int kt = 0; kt < tiles; ++kt) {
    const int after = read + 1 == G::STAGES ? 0 : read + 1;
#pragma unroll
    for (int step = 0; step < G::STEPS; ++step) {
      if (step == 0) {  // refill the stage step kt-1 used: every warp read it before the barrier that ended step kt-1
        const int fill = kt + G::STAGES - 1;
        const int into = read == 0 ? G::STAGES - 1 : read - 1;
        if (fill < tiles) load_step(fill, stage_a(into), stage_b(into));
        cp_async_commit();
      }
      if constexpr (!G::PREFETCH) {
        load_fragments<G>(frag[0], stage_a(read), stage_b(read), kk0 + step * G::MMA_K, wm0, wn0, lane);
        multiply<G>(acc, frag[0]);
        continue;
      }
      if (step + 1 < G::STEPS) {
        load_fragments<G>(frag[(step + 1) % 2], stage_a(read), stage_b(read), kk0 + (step + 1) * G::MMA_K, wm0, wn0,
                          lane);
      } else {  // step kt+1 must have landed, visible to every warp, before its first fragments are read
        cp_async_wait<G::STAGES - 2>();
        __syncthreads();
        if (kt + 1 < tiles)
          load_fragments<G>(frag[(step + 1) % 2], stage_a(after), stage_b(after), kk0, wm0, wn0, lane);
      }
      multiply<G>(acc, frag[step % 2]);
    }
    if constexpr (!G::PREFETCH) {  // step kt+1 landed and visible, and every warp done with step kt's stage
      cp_async_wait<G::STAGES - 2>();
      __syncthreads();
    } else if constexpr (G::STEPS % 2 == 1) {
      frag[0] = frag[1];  // the next step's fragments landed in frag[STEPS % 2]
    }
    read = after;
  }
  cp_async_wait<0>();
}

// Writes a warp's finished piece of the tile at (m0, n0) through the fused epilogue (split-K: its raw sums into the
// workspace). Accumulator e of tensor-core tile (i, j) holds C(g + 8·(e/2), 2t + e%2) of that 16 x 8 tile.
template <class G>
__device__ __forceinline__ void store_tile(const float (&acc)[G::TILES_M][G::TILES_N][4], const GemmArgs &args, int m0,
                                           int n0, int wm0, int wn0, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < G::TILES_M; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = m0 + wm0 + i * 16 + g + half * 8;
      if (row >= args.m) continue;
#pragma unroll
      for (int j = 0; j < G::TILES_N; ++j) {
        const float pair[2] = {acc[i][j][2 * half], acc[i][j][2 * half + 1]};
        store_row<G::EPILOGUE, typename G::T, 2, (G::SPLIT_K > 1)>(args, row, n0 + wn0 + j * 8 + 2 * t, pair);
      }
    }
}

// ---- SIMT ---------------------------------------------------------------------------------------------------------

// Registers -> the shared buffer `buf` (A_s then B_s): A transposed (A_s[k][m]); B as B_s[k][n], transposed from
// layout nt. Load i of this thread is chunk tid + i·THREADS of each tile, VEC elements along K (along N for B in nn).
template <class G>
__device__ __forceinline__ void stash(typename G::T *buf, const Vec<typename G::T, G::VEC> (&ra)[G::LOADS_A],
                                      const Vec<typename G::T, G::VEC> (&rb)[G::LOADS_B]) {
  constexpr int A_PER_ROW = G::BLOCK_K / G::VEC;
  constexpr int B_PER_ROW = G::LAYOUT == Layout::NN ? G::BLOCK_N / G::VEC : G::BLOCK_K / G::VEC;
  using V = Vec<typename G::T, G::VEC>;
  typename G::T *sa = buf, *sb = buf + G::BLOCK_K * G::LDA_S;
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < G::LOADS_A; ++i) {
    const int chunk = tid + i * G::THREADS;
    if (!G::has_chunk_a(chunk)) continue;
    const int m = chunk / A_PER_ROW, k = (chunk % A_PER_ROW) * G::VEC;
#pragma unroll
    for (int e = 0; e < G::VEC; ++e) sa[(k + e) * G::LDA_S + m] = ra[i].v[e];  // transposed: A_s[k][m]
  }
#pragma unroll
  for (int i = 0; i < G::LOADS_B; ++i) {
    const int chunk = tid + i * G::THREADS;
    if (!G::has_chunk_b(chunk)) continue;
    if constexpr (G::LAYOUT == Layout::NN) {
      *reinterpret_cast<V *>(sb + (chunk / B_PER_ROW) * G::LDB_S + (chunk % B_PER_ROW) * G::VEC) = rb[i];
    } else {
      const int n = chunk / B_PER_ROW, k = (chunk % B_PER_ROW) * G::VEC;
#pragma unroll
      for (int e = 0; e < G::VEC; ++e) sb[(k + e) * G::LDB_S + n] = rb[i].v[e];  // transposed: B_s[k][n]
    }
  }
}

// The SIMT main loop, gemm_simt.cuh's (its header comment) as a function of where the tiles come from, over `tiles`
// steps of BLOCK_K: `fetch(kt)` reads step kt from global memory
// into ra and rb (called for kt = 0, 1, ... in order, while the previous step multiplies). On return acc holds this
// lane's sums.
template <class G, class Fetch>
__device__ __forceinline__ void simt_mainloop(typename G::T (&acc)[G::ROWS][G::COLS], typename G::T *smem, int tiles,
                                              Fetch &&fetch, Vec<typename G::T, G::VEC> (&ra)[G::LOADS_A],
                                              Vec<typename G::T, G::VEC> (&rb)[G::LOADS_B], int wm0, int wn0, int lm,
                                              int ln) {
  using T = typename G::T;
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

  if (tiles > 0) {
    fetch(0);
    stash<G>(smem, ra, rb);
  }
  __syncthreads();
  if constexpr (G::PREFETCH) load_fragments(0, 0, 0);
  int buf = 0;  // the buffer this step reads; the next step's tile goes into the other
  for (int kt = 0; kt < tiles; ++kt) {
    const int other = G::BUFFER - buf;
    const bool more = kt + 1 < tiles;
    if (more) fetch(kt + 1);  // in flight while this step multiplies
#pragma unroll
    for (int k = 0; k < G::BLOCK_K; ++k) {
      if constexpr (G::PREFETCH) {
        const int next = (k + 1) % 2;  // BLOCK_K is even: the next step's k = 0 lands in set 0
        if (k + 1 < G::BLOCK_K) {
          load_fragments(next, buf, k + 1);
        } else {
          // Last k: the next step's tile goes into the other buffer (free: every warp passed the previous barrier
          // after its last read of it), one barrier, and the next step's first fragments load under these products.
          if (more) stash<G>(smem + other, ra, rb);
          __syncthreads();
          load_fragments(next, other, 0);
        }
        multiply(k % 2);
      } else {
        load_fragments(0, buf, k);
        multiply(0);
        if (k + 1 == G::BLOCK_K) {
          if (more) stash<G>(smem + other, ra, rb);
          __syncthreads();
        }
      }
    }
    buf = other;
  }
}

// Writes this lane's finished accumulators of the tile at (m0, n0) through the fused epilogue (split-K: raw sums into
// the workspace). Lane piece (i, j) of sub-tile (s, u) is C(wm0 + s·LANES_M·4 + 4 lm + i, wn0 + u·LANES_N·4 + 4 ln + j).
template <class G>
__device__ __forceinline__ void simt_store_tile(const typename G::T (&acc)[G::ROWS][G::COLS], const GemmArgs &args,
                                                int m0, int n0, int wm0, int wn0, int lm, int ln) {
#pragma unroll
  for (int i = 0; i < G::ROWS; ++i) {
    const int row = m0 + wm0 + (i / G::LANE_M) * (G::LANES_M * G::LANE_M) + lm * G::LANE_M + i % G::LANE_M;
    if (row >= args.m) continue;
#pragma unroll
    for (int u = 0; u < G::SUB_N; ++u) {
      typename G::T piece[G::LANE_N];
#pragma unroll
      for (int j = 0; j < G::LANE_N; ++j) piece[j] = acc[i][u * G::LANE_N + j];
      store_row<G::EPILOGUE, typename G::T, G::LANE_N, (G::SPLIT_K > 1)>(
          args, row, n0 + wn0 + u * (G::LANES_N * G::LANE_N) + ln * G::LANE_N, piece);
    }
  }
}

}  // namespace tracea
