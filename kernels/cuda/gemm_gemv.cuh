// GEMV-class fp32 GEMM for a few rows of C (M <= 16, layout nn): a run bound by reading B once at full bandwidth.
//
// A block computes ROWS x BLOCK_N of C over one slice of K (grid z: SPLIT_K slices). Its 256 threads form a grid of
// COL_THREADS x K_GROUPS: thread (col, group) owns VEC adjacent columns of C for every one of the ROWS rows, and the
// rows k of each BLOCK_K step with k % K_GROUPS == group. A warp reads whole rows of B (VEC-wide loads, consecutive
// threads on consecutive columns), each element of B exactly once in the whole grid.
//
// Each step: the step's B loads go out first (BLOCK_K / K_GROUPS vector loads a thread, all in flight at once), then
// the block stages the step's A (ROWS x BLOCK_K, k-major: A_s[k][r]) in one of two shared buffers, one barrier, and
// every thread multiplies: for each of its k, the ROWS values of A_s[k] (one broadcast vector load per four rows)
// times its VEC values of B[k]. With PREFETCH a second set of registers takes the next step's B: its loads go out
// before this step's A, barrier and products, so that B is in flight across them (twice the B registers).
// The K_GROUPS partial sums of a column are added in shared memory in a fixed order; with SPLIT_K > 1 each slice
// writes its sums to its own part of the workspace (no atomics, no memset) and gemm_splitk_sum adds the slices in
// order and applies the epilogue: the result does not depend on scheduling.
#pragma once

#include "gemm_common.cuh"

namespace tracea {

template <class T_, Layout LAYOUT_, Epilogue EPILOGUE_, int ROWS_, int BLOCK_N_, int BLOCK_K_, int VEC_, int SPLIT_K_,
          int PREFETCH_ = 0>
struct GemvGemm {
  using T = T_;
  static constexpr Layout LAYOUT = LAYOUT_;
  static constexpr Epilogue EPILOGUE = EPILOGUE_;
  static constexpr int ROWS = ROWS_, BLOCK_N = BLOCK_N_, BLOCK_K = BLOCK_K_, VEC = VEC_, SPLIT_K = SPLIT_K_;
  static constexpr bool PREFETCH = PREFETCH_ != 0;  // the next step's B loads in flight during this step
  static constexpr int BLOCK_M = ROWS;  // the output tile is ROWS x BLOCK_N (the plan's "tiles" grid rule)

  static constexpr int THREADS = 256;
  static constexpr int COL_THREADS = BLOCK_N / VEC, K_GROUPS = THREADS / COL_THREADS;
  static constexpr int K_PER_THREAD = BLOCK_K / K_GROUPS;  // B loads in flight per thread and step
  // Rows of C whose partial sums are added per round of the block's reduction: a 16 KiB buffer.
  static constexpr int RED_ROWS = ROWS < 16 / VEC ? ROWS : 16 / VEC;
  static constexpr int A_BUFFER = BLOCK_K * ROWS;
  static constexpr int A_BYTES = 2 * A_BUFFER * int(sizeof(T)), RED_BYTES = THREADS * RED_ROWS * VEC * int(sizeof(T));
  static constexpr int SMEM_BYTES = A_BYTES > RED_BYTES ? A_BYTES : RED_BYTES;
  static constexpr int MIN_BLOCKS = 1;

  static_assert(sizeof(T) == 4, "the GEMV kernel is fp32");
  static_assert(LAYOUT == Layout::NN, "the GEMV kernel reads rows of B along N (layout nn)");
  static_assert(BLOCK_N % VEC == 0 && THREADS % COL_THREADS == 0, "column threads must tile the block");
  static_assert(BLOCK_K % K_GROUPS == 0, "each K group takes the same number of rows of a step");
  static_assert(ROWS <= 4 || ROWS % 4 == 0, "A_s rows are read four at a time");
  static_assert(ROWS % RED_ROWS == 0, "the reduction goes in whole rounds");
};

template <class G> __device__ void gemm_gemv(const GemmArgs &args) {
  using T = typename G::T;
  using V = Vec<T, G::VEC>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T *smem = reinterpret_cast<T *>(smem_raw);
  const T *A = static_cast<const T *>(args.a);
  const T *B = static_cast<const T *>(args.b);

  const int tiles_n = ceil_div(args.n, G::BLOCK_N);
  const int m0 = (blockIdx.x / tiles_n) * G::ROWS, n0 = (blockIdx.x % tiles_n) * G::BLOCK_N;
  const KSlice slice = k_slice<G::BLOCK_K, G::SPLIT_K>(args.k, blockIdx.z);

  const int tid = threadIdx.x, col = tid % G::COL_THREADS, group = tid / G::COL_THREADS;
  const int n = n0 + col * G::VEC;
  const bool n_in = n < args.n;  // N is a multiple of VEC (the space checks it): a vector is whole or outside
  const T *b_src = B + static_cast<size_t>(slice.begin + group) * args.ldb + (n_in ? n : 0);
  const size_t b_row_step = static_cast<size_t>(G::K_GROUPS) * args.ldb;

  T acc[G::ROWS][G::VEC];
#pragma unroll
  for (int r = 0; r < G::ROWS; ++r)
#pragma unroll
    for (int v = 0; v < G::VEC; ++v) acc[r][v] = T(0);

  // One step's B: this thread's rows k0 + group + i·K_GROUPS from `src` (row k0 + group), zeros past the slice's end
  // or the matrix's last column.
  const auto load_b = [&](V *dst, int k0, const T *src) {
#pragma unroll
    for (int i = 0; i < G::K_PER_THREAD; ++i) {
      const bool inside = n_in && k0 + group + i * G::K_GROUPS < slice.end;
#pragma unroll
      for (int v = 0; v < G::VEC; ++v) dst[i].v[v] = T(0);
      if (inside) dst[i] = *reinterpret_cast<const V *>(src + i * b_row_step);
    }
  };
  const size_t b_step = static_cast<size_t>(G::BLOCK_K) * args.ldb;

  V rb[G::K_PER_THREAD];                             // the step's B
  V rn[G::PREFETCH ? G::K_PER_THREAD : 1];           // the next step's (PREFETCH)
  if (G::PREFETCH && slice.tiles > 0) load_b(rb, slice.begin, b_src);
  for (int kt = 0; kt < slice.tiles; ++kt) {
    const int k0 = slice.begin + kt * G::BLOCK_K;
    if constexpr (G::PREFETCH) {
      if (kt + 1 < slice.tiles) load_b(rn, k0 + G::BLOCK_K, b_src + b_step);
    } else {
      load_b(rb, k0, b_src);
    }
    b_src += b_step;

    // A's ROWS x BLOCK_K piece into buffer kt % 2, transposed (A_s[k][r]); rows past M and k past the slice are 0.
    // The other buffer may still be read by slower threads of the previous step: this one was last read two steps
    // ago, before the previous step's barrier.
    T *a_s = smem + (kt % 2) * G::A_BUFFER;
    for (int e = tid; e < G::ROWS * G::BLOCK_K; e += G::THREADS) {
      const int r = e / G::BLOCK_K, k = e % G::BLOCK_K;
      const bool inside = m0 + r < args.m && k0 + k < slice.end;
      a_s[k * G::ROWS + r] = inside ? A[static_cast<size_t>(m0 + r) * args.lda + k0 + k] : T(0);
    }
    __syncthreads();

#pragma unroll
    for (int i = 0; i < G::K_PER_THREAD; ++i) {
      const T *a_row = a_s + (group + i * G::K_GROUPS) * G::ROWS;
#pragma unroll
      for (int r0 = 0; r0 < G::ROWS; r0 += (G::ROWS < 4 ? G::ROWS : 4)) {
        constexpr int PIECE = G::ROWS < 4 ? G::ROWS : 4;
        const Vec<T, PIECE> a = *reinterpret_cast<const Vec<T, PIECE> *>(a_row + r0);
#pragma unroll
        for (int r = 0; r < PIECE; ++r)
#pragma unroll
          for (int v = 0; v < G::VEC; ++v) acc[r0 + r][v] = fma(a.v[r], rb[i].v[v], acc[r0 + r][v]);
      }
    }
    if constexpr (G::PREFETCH) {
#pragma unroll
      for (int i = 0; i < G::K_PER_THREAD; ++i) rb[i] = rn[i];
    }
  }

  // The K groups' sums of each column, RED_ROWS rows a round: red[group][r][column of the block], added in group order.
  T *red = smem;
#pragma unroll
  for (int r0 = 0; r0 < G::ROWS; r0 += G::RED_ROWS) {
    __syncthreads();  // the last step's A_s reads (first round) or the previous round's sums are done
#pragma unroll
    for (int r = 0; r < G::RED_ROWS; ++r)
#pragma unroll
      for (int v = 0; v < G::VEC; ++v)
        red[(group * G::RED_ROWS + r) * G::BLOCK_N + col * G::VEC + v] = acc[r0 + r][v];
    __syncthreads();
    for (int e = tid; e < G::RED_ROWS * G::BLOCK_N; e += G::THREADS) {
      const int r = e / G::BLOCK_N, c = e % G::BLOCK_N, row = m0 + r0 + r, column = n0 + c;
      T sum = T(0);
      for (int g = 0; g < G::K_GROUPS; ++g) sum += red[(g * G::RED_ROWS + r) * G::BLOCK_N + c];
      if (row >= args.m || column >= args.n) continue;
      if constexpr (G::SPLIT_K > 1) {
        args.workspace[(static_cast<size_t>(blockIdx.z) * args.m + row) * args.n + column] = sum;
      } else {
        static_cast<T *>(args.c)[static_cast<size_t>(row) * args.ldc + column] =
            finish<G::EPILOGUE, T>(sum, args, row, column);
      }
    }
  }
}

// Split-K's second pass: C = epilogue(sum of the SPLIT_K slices' sums, slice 0 first), one thread per element.
template <class G> __device__ void gemm_splitk_sum(const GemmArgs &args) {
  const size_t mn = static_cast<size_t>(args.m) * args.n;
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= mn) return;
  float sum = 0.0f;
#pragma unroll
  for (int z = 0; z < G::SPLIT_K; ++z) sum += args.workspace[z * mn + idx];
  const int row = static_cast<int>(idx / args.n), col = static_cast<int>(idx % args.n);
  static_cast<typename G::T *>(args.c)[static_cast<size_t>(row) * args.ldc + col] =
      finish<G::EPILOGUE, typename G::T>(sum, args, row, col);
}

}  // namespace tracea
