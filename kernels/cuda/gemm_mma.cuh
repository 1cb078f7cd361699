// Tensor-core GEMM with mma.sync (sm_80 and later): fp16 and bf16 (m16n8k16), tf32 (m16n8k8), fp32 accumulation;
// fp32 at fp32 accuracy as 3xTF32 (PASSES = 3: split operands, three m16n8k8 products per step, see MmaGemm).
//
// A block computes a BLOCK_M x BLOCK_N tile of C. Its warps form a (BLOCK_M/WARP_M) x (BLOCK_N/WARP_N) grid; a warp
// owns a WARP_M x WARP_N piece, made of (WARP_M/16) x (WARP_N/8) tensor-core tiles of 16 x 8.
//
// Sliced K (SLICE_K > 1): the block holds SLICE_K such grids of warps. All of them copy each pipeline step together;
// K-slice s multiplies only the s-th run of BLOCK_K/MMA_K/SLICE_K instruction steps of it. After the main loop the
// slices' partial sums meet in shared memory (the pipeline's, no longer needed) and slice 0 runs the epilogue. Tiles
// of a few rows then get many warps and deep steps: bytes in flight for a GEMM bound by reading B (small M).
//
// Cluster K (CLUSTER_K > 1, sm_90): the CLUSTER_K blocks of a thread-block cluster (grid z, __cluster_dims__ on the
// entry) share one tile, each taking an equal run of K's steps; after their own slice sums, blocks 1.. add theirs into
// block 0's shared memory (DSMEM), which runs the epilogue. Split K without a workspace or a second launch.
//
// Main loop, a STAGES-deep pipeline over BLOCK_K steps of K (each made of BLOCK_K/MMA_K instruction steps, STEPS of
// them per warp):
//   prologue: start copying steps 0 .. STAGES-2 into their shared-memory stages (cp.async); wait for step 0;
//   step kt:  start copying step kt+STAGES-1 into the stage step kt-1 used; multiply step kt out of its stage;
//             wait for step kt+1 to land (a barrier). With PREFETCH, each instruction step's fragments are loaded
//             while the previous one multiplies, and the barrier comes before the last instruction step, whose
//             products then cover the loading of step kt+1's first fragments.
// 16-bit fragments come from shared memory with ldmatrix (transposed for B in layout nn). ldmatrix moves 16-bit
// elements only, so tf32 fragments are read with plain shared loads.
//
// Shared rows are padded by 16 or 32 bytes so that the eight row addresses of an ldmatrix (or the lanes of a
// fragment load) fall on distinct banks.
#pragma once

#include "gemm_common.cuh"

namespace tracea {

template <class T_, Layout LAYOUT_, Epilogue EPILOGUE_, int BLOCK_M_, int BLOCK_N_, int BLOCK_K_, int WARP_M_, int WARP_N_,
          int STAGES_, int VEC_, int SPLIT_K_, int GROUP_M_, int SLICE_K_ = 1, int CLUSTER_K_ = 1, int PASSES_ = 1>
struct MmaGemm {
  using T = T_;
  static constexpr Layout LAYOUT = LAYOUT_;
  static constexpr Epilogue EPILOGUE = EPILOGUE_;
  static constexpr int BLOCK_M = BLOCK_M_, BLOCK_N = BLOCK_N_, BLOCK_K = BLOCK_K_;
  static constexpr int WARP_M = WARP_M_, WARP_N = WARP_N_;
  static constexpr int STAGES = STAGES_, VEC = VEC_, SPLIT_K = SPLIT_K_, GROUP_M = GROUP_M_, SLICE_K = SLICE_K_;
  static constexpr int CLUSTER_K = CLUSTER_K_;

  static constexpr bool TF32 = SameType<T, float>::value;
  // PASSES = 3: fp32 at fp32 accuracy on tf32 tensor cores (3xTF32, see split_tf32): three products per step. The
  // tensor cores' fp32 sums truncate rather than round (Fasi et al., "Numerical behavior of NVIDIA tensor cores",
  // 2021), so their error grows with the products summed into one accumulator: over K = 2048 and 4096 on an H100
  // 1.4e-5 and 2.9e-5, above fp32's bound. So each pipeline step sums into fresh accumulators (`part`), added to the
  // running sums in IEEE fp32: twice the accumulator registers.
  static constexpr int PASSES = PASSES_;
  static constexpr bool SPLIT = PASSES == 3;
  static constexpr int MMA_K = TF32 ? 8 : 16;
  static constexpr int WARPS_M = BLOCK_M / WARP_M, WARPS_N = BLOCK_N / WARP_N;
  static constexpr int TILE_WARPS = WARPS_M * WARPS_N;  // the warps of one K-slice, covering the block tile
  static constexpr int TILE_THREADS = TILE_WARPS * 32;  // the threads of one K-slice
  static constexpr int THREADS = TILE_THREADS * SLICE_K;
  static constexpr int TILES_M = WARP_M / 16, TILES_N = WARP_N / 8;  // tensor-core tiles per warp
  static constexpr int STEPS = BLOCK_K / MMA_K / SLICE_K;              // a warp's instruction steps per pipeline step
  static constexpr int ACCUMULATORS = TILES_M * TILES_N * 4;           // per thread
  // Double-buffered fragments (the next instruction step's loaded while this one multiplies) need a second set of
  // fragment registers; beside 128 accumulators that fits only with few steps' addresses live (ptxas spills
  // otherwise, see docs/engine.md), so the big warp tiles with deep BLOCK_K load each step's fragments just in time.
  // 3xTF32 holds big and small fragments and two sets of accumulators: it prefetches where all of them, twice the
  // fragments included, take at most 192 registers.
  static constexpr int FRAGMENT_REGS = TILES_M * 4 + TILES_N * 2;
  static constexpr bool PREFETCH = SPLIT ? 2 * ACCUMULATORS + 4 * FRAGMENT_REGS <= 192
                                         : ACCUMULATORS < 128 || STEPS <= 2;

  // Shared memory per stage: A as [BLOCK_M][BLOCK_K], B as [BLOCK_K][BLOCK_N] (nn) or [BLOCK_N][BLOCK_K] (nt), each
  // row padded. tf32 pads K-rows by 8 floats (fragment pairs hit distinct banks) and N-rows by 4 floats.
  static constexpr bool B_K_ROWS = LAYOUT == Layout::NN;  // B's shared rows run along N, one per k
  static constexpr int PAD_K_ROWS = TF32 ? 8 : 8;
  static constexpr int PAD_N_ROWS = TF32 ? 4 : 8;
  static constexpr int LDA_S = BLOCK_K + PAD_K_ROWS;
  static constexpr int B_ROWS = B_K_ROWS ? BLOCK_K : BLOCK_N;
  static constexpr int LDB_S = B_K_ROWS ? BLOCK_N + PAD_N_ROWS : BLOCK_K + PAD_K_ROWS;
  static constexpr int STAGE_A = BLOCK_M * LDA_S, STAGE_B = B_ROWS * LDB_S;
  static constexpr int PIPELINE_BYTES = STAGES * (STAGE_A + STAGE_B) * int(sizeof(T));
  // Slices 1 .. SLICE_K-1 leave their accumulators here for slice 0: float [SLICE_K-1][ACCUMULATORS][TILE_WARPS*32].
  // The larger of the K-slices' and (in block 0) the cluster's other blocks' sums, same layout.
  static constexpr int REDUCTION_BYTES =
      ((SLICE_K > CLUSTER_K ? SLICE_K : CLUSTER_K) - 1) * ACCUMULATORS * TILE_WARPS * 32 * int(sizeof(float));
  static constexpr int SMEM_BYTES = PIPELINE_BYTES > REDUCTION_BYTES ? PIPELINE_BYTES : REDUCTION_BYTES;

  static_assert(BLOCK_M % WARP_M == 0 && BLOCK_N % WARP_N == 0, "warp tiles must divide the block tile");
  static_assert(WARP_M % 16 == 0 && WARP_N % 16 == 0, "a warp tile is made of 16 x 16 pieces");
  static_assert(BLOCK_K % (MMA_K * SLICE_K) == 0, "each K-slice multiplies whole instruction steps of a pipeline step");
  static_assert(STAGES >= 2, "the pipeline needs two stages at least");
  static_assert(PASSES == 1 || (PASSES == 3 && TF32), "three passes split fp32 operands (3xTF32)");
  static_assert(CLUSTER_K == 1 || (SPLIT_K == 1 && CLUSTER_K <= 8), "cluster K replaces split K; clusters of 8 at most");
  static_assert(VEC * sizeof(T) <= 16 && BLOCK_K % VEC == 0 && BLOCK_N % VEC == 0, "bad vector width");
};

// Copies a ROWS x COLS tile of a row-major matrix (rows from r0, columns from c0, leading dimension ld) into shared
// memory with row stride LDS, VEC elements per copy. Copies past row_end or col_end are zero-filled. The space
// guarantees that col_end is a multiple of VEC when VEC > 1, so a vector is either wholly inside or wholly outside.
template <class T, int ROWS, int COLS, int LDS, int VEC, int THREADS>
__device__ __forceinline__ void copy_tile(T *dst, const T *src, int ld, int r0, int c0, int row_end, int col_end) {
  constexpr int PER_ROW = COLS / VEC, CHUNKS = ROWS * PER_ROW, BYTES = VEC * int(sizeof(T));
#pragma unroll
  for (int i = 0; i < ceil_div(CHUNKS, THREADS); ++i) {
    const int chunk = int(threadIdx.x) + i * THREADS;
    if (CHUNKS % THREADS != 0 && chunk >= CHUNKS) break;
    const int r = chunk / PER_ROW, col = (chunk % PER_ROW) * VEC;
    const bool valid = r0 + r < row_end && c0 + col < col_end;
    const T *from = valid ? src + static_cast<size_t>(r0 + r) * ld + (c0 + col) : src;
    T *to = dst + r * LDS + col;
    if constexpr (BYTES >= 4) {
      cp_async<BYTES>(smem_address(to), from, valid);
    } else {  // a single 16-bit element: cp.async moves 4 bytes at least, so copy through a register
      *reinterpret_cast<unsigned short *>(to) = valid ? *reinterpret_cast<const unsigned short *>(from) : 0;
    }
  }
}

// A warp's operands for one MMA_K step: the A fragments of its 16-row tiles and the B fragments of its 8-column tiles.
template <class G> struct Fragments {
  unsigned a[G::TILES_M][4];
  unsigned b[G::TILES_N][2];
};

// Reads the fragments of step kk (a column of A_s, a row of B_s; kk counted in elements) from one stage.
template <class G>
__device__ __forceinline__ void load_fragments(Fragments<G> &f, const typename G::T *sa, const typename G::T *sb, int kk,
                                               int wm0, int wn0, int lane) {
  if constexpr (!G::TF32) {
    // A: lanes 0-15 address rows 0-15 at column kk, lanes 16-31 the same rows at kk + 8; the four matrices are
    // exactly the fragment registers a0a1, a2a3, a4a5, a6a7 of m16n8k16.
#pragma unroll
    for (int i = 0; i < G::TILES_M; ++i)
      ldmatrix_x4(f.a[i], smem_address(sa + (wm0 + i * 16 + lane % 16) * G::LDA_S + kk + (lane / 16) * 8));
    // B: one ldmatrix gives two 8-column tiles (b0b1, b2b3 of columns +0, then of columns +8).
#pragma unroll
    for (int j = 0; j < G::TILES_N; j += 2) {
      unsigned r[4];
      if constexpr (G::B_K_ROWS) {  // B_s[k][n]: rows are k, transposed on the way into registers
        ldmatrix_x4_trans(r, smem_address(sb + (kk + lane % 16) * G::LDB_S + wn0 + j * 8 + (lane / 16) * 8));
      } else {  // B_s[n][k]: rows are n, already in the "col" operand's order
        ldmatrix_x4(r, smem_address(sb + (wn0 + j * 8 + lane % 8 + (lane / 16) * 8) * G::LDB_S + kk +
                                    ((lane / 8) % 2) * 8));
      }
      f.b[j][0] = r[0], f.b[j][1] = r[1], f.b[j + 1][0] = r[2], f.b[j + 1][1] = r[3];
    }
  } else {
    // tf32 m16n8k8 wants A(g, t), A(g+8, t), A(g, t+4), A(g+8, t+4) and B(t, g), B(t+4, g), with g = lane/4 and
    // t = lane%4. Reading k in the order 0,4,1,5,2,6,3,7 (the same for A and B, so the sum is unchanged) puts each
    // thread's two k values side by side: A and B in layout nt come as one 8-byte load per pair.
    const int g = lane / 4, t2 = (lane % 4) * 2;
#pragma unroll
    for (int i = 0; i < G::TILES_M; ++i) {
      const float2 top = *reinterpret_cast<const float2 *>(sa + (wm0 + i * 16 + g) * G::LDA_S + kk + t2);
      const float2 bottom = *reinterpret_cast<const float2 *>(sa + (wm0 + i * 16 + g + 8) * G::LDA_S + kk + t2);
      f.a[i][0] = to_tf32(top.x), f.a[i][1] = to_tf32(bottom.x), f.a[i][2] = to_tf32(top.y), f.a[i][3] = to_tf32(bottom.y);
    }
#pragma unroll
    for (int j = 0; j < G::TILES_N; ++j) {
      const int n = wn0 + j * 8 + g;
      if constexpr (G::B_K_ROWS) {
        f.b[j][0] = to_tf32(sb[(kk + t2) * G::LDB_S + n]), f.b[j][1] = to_tf32(sb[(kk + t2 + 1) * G::LDB_S + n]);
      } else {
        const float2 pair = *reinterpret_cast<const float2 *>(sb + n * G::LDB_S + kk + t2);
        f.b[j][0] = to_tf32(pair.x), f.b[j][1] = to_tf32(pair.y);
      }
    }
  }
}

// acc += A·B over one MMA_K step: every 16 x 8 tile of the warp's piece of C.
template <class G>
__device__ __forceinline__ void multiply(float (&acc)[G::TILES_M][G::TILES_N][4], const Fragments<G> &f) {
#pragma unroll
  for (int i = 0; i < G::TILES_M; ++i)
#pragma unroll
    for (int j = 0; j < G::TILES_N; ++j) mma_16x8<typename G::T>(acc[i][j], f.a[i], f.b[j]);
}

// 3xTF32: v = big + small, both exactly representable in tf32 (big rounded to nearest, as to_tf32 rounds; small the
// remainder, exact in fp32, then rounded to tf32 too).
__device__ __forceinline__ void split_tf32(float v, unsigned &big, unsigned &small) {
  big = to_tf32(v);
  small = to_tf32(v - __uint_as_float(big & 0xFFFFE000u));
}

// The big and small fp32 fragments of one m16n8k8 step (kk counted in elements), read as the GEMM engine's tf32
// loader reads them (load_fragments above: k in the order 0,4,1,5,2,6,3,7, the same for A and B, so that a
// thread's two k values sit side by side).
template <class G>
__device__ __forceinline__ void load_split_fragments(Fragments<G> &big, Fragments<G> &small, const float *sa,
                                                     const float *sb, int kk, int wm0, int wn0, int lane) {
  const int g = lane / 4, t2 = (lane % 4) * 2;
#pragma unroll
  for (int i = 0; i < G::TILES_M; ++i) {
    const float2 top = *reinterpret_cast<const float2 *>(sa + (wm0 + i * 16 + g) * G::LDA_S + kk + t2);
    const float2 bottom = *reinterpret_cast<const float2 *>(sa + (wm0 + i * 16 + g + 8) * G::LDA_S + kk + t2);
    split_tf32(top.x, big.a[i][0], small.a[i][0]);
    split_tf32(bottom.x, big.a[i][1], small.a[i][1]);
    split_tf32(top.y, big.a[i][2], small.a[i][2]);
    split_tf32(bottom.y, big.a[i][3], small.a[i][3]);
  }
#pragma unroll
  for (int j = 0; j < G::TILES_N; ++j) {
    const int n = wn0 + j * 8 + g;
    float2 pair;
    if constexpr (G::B_K_ROWS) {
      pair.x = sb[(kk + t2) * G::LDB_S + n];
      pair.y = sb[(kk + t2 + 1) * G::LDB_S + n];
    } else {
      pair = *reinterpret_cast<const float2 *>(sb + n * G::LDB_S + kk + t2);
    }
    split_tf32(pair.x, big.b[j][0], small.b[j][0]);
    split_tf32(pair.y, big.b[j][1], small.b[j][1]);
  }
}

// acc += A·B over one step at fp32 accuracy: the two cross terms first (they are small), then big·big.
template <class G>
__device__ __forceinline__ void multiply_split(float (&acc)[G::TILES_M][G::TILES_N][4], const Fragments<G> &big,
                                               const Fragments<G> &small) {
#pragma unroll
  for (int i = 0; i < G::TILES_M; ++i)
#pragma unroll
    for (int j = 0; j < G::TILES_N; ++j) {
      mma_16x8<float>(acc[i][j], big.a[i], small.b[j]);
      mma_16x8<float>(acc[i][j], small.a[i], big.b[j]);
      mma_16x8<float>(acc[i][j], big.a[i], big.b[j]);
    }
}

template <class G> __device__ __forceinline__ void clear(float (&acc)[G::TILES_M][G::TILES_N][4]) {
#pragma unroll
  for (int i = 0; i < G::TILES_M; ++i)
#pragma unroll
    for (int j = 0; j < G::TILES_N; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}

template <class G>
__device__ __forceinline__ void add_into(float (&acc)[G::TILES_M][G::TILES_N][4],
                                         const float (&part)[G::TILES_M][G::TILES_N][4]) {
#pragma unroll
  for (int i = 0; i < G::TILES_M; ++i)
#pragma unroll
    for (int j = 0; j < G::TILES_N; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] += part[i][j][e];
}

// One instruction step's operands: the fragments, or (3xTF32) their big and small parts.
template <bool C, class X, class Y> struct Select { using type = X; };
template <class X, class Y> struct Select<false, X, Y> { using type = Y; };
template <class G> struct SplitFragments {
  Fragments<G> big, small;
};
template <class G> using StepFragments = typename Select<G::SPLIT, SplitFragments<G>, Fragments<G>>::type;

template <class G>
__device__ __forceinline__ void load_step_fragments(StepFragments<G> &f, const typename G::T *sa,
                                                    const typename G::T *sb, int kk, int wm0, int wn0, int lane) {
  if constexpr (G::SPLIT)
    load_split_fragments<G>(f.big, f.small, sa, sb, kk, wm0, wn0, lane);
  else
    load_fragments<G>(f, sa, sb, kk, wm0, wn0, lane);
}

template <class G>
__device__ __forceinline__ void multiply_step(float (&acc)[G::TILES_M][G::TILES_N][4], const StepFragments<G> &f) {
  if constexpr (G::SPLIT)
    multiply_split<G>(acc, f.big, f.small);
  else
    multiply<G>(acc, f);
}

// Adds COUNT partial sums laid out [COUNT][ACCUMULATORS][TILE_WARPS*32] (from this thread's slot) into acc.
template <class G, int COUNT>
__device__ __forceinline__ void add_partials(float (&acc)[G::TILES_M][G::TILES_N][4], const float *partial) {
#pragma unroll
  for (int s = 0; s < COUNT; ++s) {
    const float *theirs = partial + s * G::ACCUMULATORS * G::TILE_THREADS;
#pragma unroll
    for (int i = 0; i < G::TILES_M; ++i)
#pragma unroll
      for (int j = 0; j < G::TILES_N; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] += theirs[((i * G::TILES_N + j) * 4 + e) * G::TILE_THREADS];
  }
}

// Cluster-wide barrier: release this block's shared-memory writes (local or remote), acquire the others'.
__device__ __forceinline__ void cluster_barrier() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// Stores v at shared-memory address `addr` (this block's layout) of block 0 of the cluster.
__device__ __forceinline__ void store_to_block0(unsigned addr, float v) {
#if __CUDA_ARCH__ >= 900
  asm volatile("{\n.reg .u32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\nst.shared::cluster.f32 [remote], %2;\n}"
               ::"r"(addr), "r"(0u), "f"(v) : "memory");
#endif
}

template <class G> __device__ void gemm_mma(const GemmArgs &args) {
  using T = typename G::T;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T *smem = reinterpret_cast<T *>(smem_raw);
  const T *A = static_cast<const T *>(args.a);
  const T *B = static_cast<const T *>(args.b);

  const int2 tile = tile_coords(blockIdx.x, ceil_div(args.m, G::BLOCK_M), ceil_div(args.n, G::BLOCK_N), G::GROUP_M);
  const int m0 = tile.x * G::BLOCK_M, n0 = tile.y * G::BLOCK_N;
  const KSlice slice = k_slice<G::BLOCK_K, G::SPLIT_K * G::CLUSTER_K>(args.k, blockIdx.z);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tile_warp = G::SLICE_K > 1 ? warp % G::TILE_WARPS : warp;  // this warp's place in the block tile
  const int warp_slice = G::SLICE_K > 1 ? warp / G::TILE_WARPS : 0;    // the K-slice of warps it belongs to
  const int wm0 = (tile_warp % G::WARPS_M) * G::WARP_M, wn0 = (tile_warp / G::WARPS_M) * G::WARP_N;
  const int kk0 = warp_slice * G::STEPS * G::MMA_K;  // where this K-slice's instruction steps start in a stage

  float acc[G::TILES_M][G::TILES_N][4], part[G::TILES_M][G::TILES_N][4];
  clear<G>(acc);
  clear<G>(part);
  float(&sum)[G::TILES_M][G::TILES_N][4] = G::SPLIT ? part : acc;  // where the products of a pipeline step go

  auto stage_a = [&](int s) { return smem + s * (G::STAGE_A + G::STAGE_B); };
  auto stage_b = [&](int s) { return smem + s * (G::STAGE_A + G::STAGE_B) + G::STAGE_A; };
  auto load_step = [&](int kt, int s) {
    const int k0 = slice.begin + kt * G::BLOCK_K;
    copy_tile<T, G::BLOCK_M, G::BLOCK_K, G::LDA_S, G::VEC, G::THREADS>(stage_a(s), A, args.lda, m0, k0, args.m, slice.end);
    if constexpr (G::B_K_ROWS)
      copy_tile<T, G::BLOCK_K, G::BLOCK_N, G::LDB_S, G::VEC, G::THREADS>(stage_b(s), B, args.ldb, k0, n0, slice.end, args.n);
    else
      copy_tile<T, G::BLOCK_N, G::BLOCK_K, G::LDB_S, G::VEC, G::THREADS>(stage_b(s), B, args.ldb, n0, k0, args.n, slice.end);
  };

  // Prologue: steps 0 .. STAGES-2 in flight and step 0 landed (with PREFETCH, its first fragments in registers).
  // Every step commits one group (empty ones too), so "at most STAGES-2 groups pending" means "the next step landed".
#pragma unroll
  for (int s = 0; s < G::STAGES - 1; ++s) {
    if (s < slice.tiles) load_step(s, s);
    cp_async_commit();
  }
  cp_async_wait<G::STAGES - 2>();
  __syncthreads();
  StepFragments<G> frag[G::PREFETCH ? 2 : 1];
  if (G::PREFETCH && slice.tiles > 0) load_step_fragments<G>(frag[0], stage_a(0), stage_b(0), kk0, wm0, wn0, lane);

  int read = 0;  // the stage holding step kt
  for (int kt = 0; kt < slice.tiles; ++kt) {
    const int after = read + 1 == G::STAGES ? 0 : read + 1;
#pragma unroll
    for (int step = 0; step < G::STEPS; ++step) {
      if (step == 0) {  // refill the stage step kt-1 used: every warp read it before the barrier that ended step kt-1
        const int fill = kt + G::STAGES - 1;
        if (fill < slice.tiles) load_step(fill, read == 0 ? G::STAGES - 1 : read - 1);
        cp_async_commit();
      }
      if constexpr (!G::PREFETCH) {
        load_step_fragments<G>(frag[0], stage_a(read), stage_b(read), kk0 + step * G::MMA_K, wm0, wn0, lane);
        multiply_step<G>(sum, frag[0]);
        continue;
      }
      if (step + 1 < G::STEPS) {
        load_step_fragments<G>(frag[(step + 1) % 2], stage_a(read), stage_b(read), kk0 + (step + 1) * G::MMA_K, wm0,
                               wn0, lane);
      } else {  // step kt+1 must have landed, visible to every warp, before its first fragments are read
        cp_async_wait<G::STAGES - 2>();
        __syncthreads();
        if (kt + 1 < slice.tiles)
          load_step_fragments<G>(frag[(step + 1) % 2], stage_a(after), stage_b(after), kk0, wm0, wn0, lane);
      }
      multiply_step<G>(sum, frag[step % 2]);
    }
    if constexpr (G::SPLIT) {  // the step's sums into the running ones, rounded to nearest
      add_into<G>(acc, part);
      clear<G>(part);
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

  // After the main loop the pipeline's shared memory holds partial sums: the K-slices', then the cluster blocks'.
  float *partial = reinterpret_cast<float *>(smem_raw);
  const int tile_thread = tile_warp * 32 + lane;
  if constexpr (G::SLICE_K > 1) {
    // Slices 1.. leave their sums in shared memory (every warp is past the main loop's last read of a stage), slice 0
    // adds them in slice order. Lane-minor layout: a warp's 32 stores or loads of one accumulator hit 32 banks.
    __syncthreads();
    if (warp_slice > 0) {
      float *mine = partial + (warp_slice - 1) * G::ACCUMULATORS * G::TILE_THREADS + tile_thread;
#pragma unroll
      for (int i = 0; i < G::TILES_M; ++i)
#pragma unroll
        for (int j = 0; j < G::TILES_N; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) mine[((i * G::TILES_N + j) * 4 + e) * G::TILE_THREADS] = acc[i][j][e];
    }
    __syncthreads();
    if (warp_slice == 0) add_partials<G, G::SLICE_K - 1>(acc, partial + tile_thread);
  }
  if constexpr (G::CLUSTER_K > 1) {
    // Every block of the cluster is past its own reduction (block 0's shared memory is free), then blocks 1.. store
    // their sums into block 0's, lane-minor as above, and block 0 adds them once they have landed. Every thread
    // takes part in both cluster barriers.
    const unsigned rank = blockIdx.z;  // __cluster_dims__(1, 1, CLUSTER_K): the cluster is the grid's z
    cluster_barrier();
    if (rank > 0 && warp_slice == 0) {
      const unsigned mine = static_cast<unsigned>(__cvta_generic_to_shared(
          partial + (rank - 1) * G::ACCUMULATORS * G::TILE_THREADS + tile_thread));
#pragma unroll
      for (int i = 0; i < G::TILES_M; ++i)
#pragma unroll
        for (int j = 0; j < G::TILES_N; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            store_to_block0(mine + 4u * ((i * G::TILES_N + j) * 4 + e) * G::TILE_THREADS, acc[i][j][e]);
    }
    cluster_barrier();
    if (rank > 0) return;
    if (warp_slice == 0) add_partials<G, G::CLUSTER_K - 1>(acc, partial + tile_thread);
  }
  if (warp_slice > 0) return;

  // Epilogue: accumulator e of tile (i, j) holds C(g + 8·(e/2), 2t + e%2) of that 16 x 8 tile.
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
        store_row<G::EPILOGUE, T, 2, (G::SPLIT_K > 1)>(args, row, n0 + wn0 + j * 8 + 2 * t, pair);
      }
    }
}

}  // namespace tracea
