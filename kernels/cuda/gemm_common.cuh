// Pieces shared by the CUDA GEMM families (gemm_simt.cuh, gemm_mma.cuh): C = epilogue(A·B).
//
// The kernel ABI (docs/kernel-abi.md): A is M x K row-major, B is K x N (layout nn) or N x K (layout nt) row-major,
// C is M x N row-major; `bias` has N entries, `residual` is M x N with C's leading dimension. Every entry point takes
// the same parameter list, TRACEA_GEMM_PARAMS, and packs it into GemmArgs.
//
// TRACEA_HOST_EMULATION (tests only, tests/engine_cuda/emulator/) compiles the same templates for the CPU: CUDA's types
// and the PTX wrappers at the end of this file then come from that folder's header.
#pragma once

#ifdef TRACEA_HOST_EMULATION
#include <tracea_host_emulation.h>
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#define TRACEA_GEMM_PARAMS                                                                                    \
  const void *__restrict__ a, const void *__restrict__ b, void *__restrict__ c, const void *__restrict__ bias, \
      const void *__restrict__ residual, float *__restrict__ workspace, int m, int n, int k, int lda, int ldb, int ldc
#define TRACEA_GEMM_ARGS tracea::GemmArgs{a, b, c, bias, residual, workspace, m, n, k, lda, ldb, ldc}

namespace tracea {

enum class Layout { NN, NT };
enum class Epilogue { None, Bias, BiasRelu, BiasSilu, BiasGelu, BiasResidual };

struct GemmArgs {
  const void *a;
  const void *b;
  void *c;
  const void *bias;
  const void *residual;
  float *workspace;  // split-K partial sums, M x N fp32 with leading dimension N
  int m, n, k;
  int lda, ldb, ldc;
};

template <class X, class Y> struct SameType { static constexpr bool value = false; };
template <class X> struct SameType<X, X> { static constexpr bool value = true; };

__host__ __device__ constexpr int ceil_div(int x, int y) { return (x + y - 1) / y; }

// Element types: how a stored element widens to the accumulator type and narrows back.
template <class T> struct Element;
template <> struct Element<float> {
  using Acc = float;
  static __device__ __forceinline__ float widen(float x) { return x; }
  static __device__ __forceinline__ float narrow(float x) { return x; }
};
template <> struct Element<double> {
  using Acc = double;
  static __device__ __forceinline__ double widen(double x) { return x; }
  static __device__ __forceinline__ double narrow(double x) { return x; }
};
template <> struct Element<__half> {
  using Acc = float;
  static __device__ __forceinline__ float widen(__half x) { return __half2float(x); }
  static __device__ __forceinline__ __half narrow(float x) { return __float2half_rn(x); }
};
template <> struct Element<__nv_bfloat16> {
  using Acc = float;
  static __device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 narrow(float x) { return __float2bfloat16_rn(x); }
};

// N consecutive elements moved as one access (16 bytes at most): the vector width of the loads and stores.
template <class T, int N> struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// ---- the fused epilogue: out = act(acc + bias[col]) + residual[row, col] -------------------------------------------

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }
__device__ __forceinline__ float erf_of(float x) { return erff(x); }
__device__ __forceinline__ double erf_of(double x) { return erf(x); }

template <Epilogue E> __host__ __device__ constexpr bool has_bias() { return E != Epilogue::None; }

template <Epilogue E, class Acc> __device__ __forceinline__ Acc activate(Acc x) {
  if constexpr (E == Epilogue::BiasRelu) {
    return x > Acc(0) ? x : Acc(0);
  } else if constexpr (E == Epilogue::BiasSilu) {
    return x / (Acc(1) + exp_of(-x));
  } else if constexpr (E == Epilogue::BiasGelu) {
    return Acc(0.5) * x * (Acc(1) + erf_of(x * Acc(0.70710678118654752440)));  // x·Φ(x), the exact GELU
  } else {
    return x;
  }
}

// The finished value of C[row, col] from its accumulated sum.
template <Epilogue E, class T>
__device__ __forceinline__ T finish(typename Element<T>::Acc acc, const GemmArgs &args, int row, int col) {
  using Acc = typename Element<T>::Acc;
  Acc v = acc;
  if constexpr (has_bias<E>()) v += Element<T>::widen(static_cast<const T *>(args.bias)[col]);
  v = activate<E, Acc>(v);
  if constexpr (E == Epilogue::BiasResidual)
    v += Element<T>::widen(static_cast<const T *>(args.residual)[static_cast<size_t>(row) * args.ldc + col]);
  return Element<T>::narrow(v);
}

// Writes WIDTH finished values of row `row` starting at column `col` (the caller checked row < M). With split-K the
// raw sums are added into the fp32 workspace instead; gemm_splitk_reduce applies the epilogue afterwards.
template <Epilogue E, class T, int WIDTH, bool SPLIT>
__device__ __forceinline__ void store_row(const GemmArgs &args, int row, int col, const typename Element<T>::Acc (&v)[WIDTH]) {
  if constexpr (SPLIT) {
    float *ws = args.workspace + static_cast<size_t>(row) * args.n;
#pragma unroll
    for (int j = 0; j < WIDTH; ++j)
      if (col + j < args.n) atomicAdd(ws + col + j, static_cast<float>(v[j]));
  } else {
    T *out = static_cast<T *>(args.c) + static_cast<size_t>(row) * args.ldc;
    if (col + WIDTH <= args.n && args.ldc % WIDTH == 0) {  // whole and aligned: one vector store
      Vec<T, WIDTH> packed;
#pragma unroll
      for (int j = 0; j < WIDTH; ++j) packed.v[j] = finish<E, T>(v[j], args, row, col + j);
      *reinterpret_cast<Vec<T, WIDTH> *>(out + col) = packed;
    } else {
#pragma unroll
      for (int j = 0; j < WIDTH; ++j)
        if (col + j < args.n) out[col + j] = finish<E, T>(v[j], args, row, col + j);
    }
  }
}

// ---- which output tile and which slice of K a block computes ------------------------------------------------------

// Tiles are numbered along blockIdx.x. They are visited in groups of `group_m` tile rows, column by column inside a
// group, so that the blocks resident at one time share rows of A and columns of B in L2. group_m = 1 is row order.
__device__ __forceinline__ int2 tile_coords(int tile, int tiles_m, int tiles_n, int group_m) {
  const int per_group = group_m * tiles_n;
  const int first_m = (tile / per_group) * group_m;
  const int rows = min(tiles_m - first_m, group_m);
  const int in_group = tile % per_group;
  return make_int2(first_m + in_group % rows, in_group / rows);
}

struct KSlice {
  int begin;  // first k of this block's slice
  int end;    // one past its last k
  int tiles;  // number of BLOCK_K steps
};

// Split-K: slice z of SPLIT_K gets an equal share of the BLOCK_K steps (the last slices may get fewer, or none).
template <int BLOCK_K, int SPLIT_K> __device__ __forceinline__ KSlice k_slice(int k, int z) {
  const int per_slice = ceil_div(ceil_div(k, BLOCK_K), SPLIT_K) * BLOCK_K;
  const int begin = min(k, z * per_slice);
  const int end = min(k, begin + per_slice);
  return KSlice{begin, end, ceil_div(end - begin, BLOCK_K)};
}

// ---- the split-K epilogue: C = epilogue(workspace) -----------------------------------------------------------------

template <class T, Epilogue E> __device__ void splitk_reduce(const GemmArgs &args) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(args.m) * args.n) return;
  const int row = static_cast<int>(idx / args.n), col = static_cast<int>(idx % args.n);
  static_cast<T *>(args.c)[static_cast<size_t>(row) * args.ldc + col] =
      finish<E, T>(static_cast<typename Element<T>::Acc>(args.workspace[idx]), args, row, col);
}

// ---- PTX: asynchronous copies, matrix loads, tensor-core products ---------------------------------------------------
#ifndef TRACEA_HOST_EMULATION

__device__ __forceinline__ unsigned smem_address(const void *p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Copies BYTES (4, 8 or 16) from global to shared memory without passing through registers; when `valid` is false
// nothing is read and the destination is filled with zeros (the edges of ragged tiles).
template <int BYTES> __device__ __forceinline__ void cp_async(unsigned dst, const void *src, bool valid) {
  const int src_bytes = valid ? BYTES : 0;
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(BYTES), "r"(src_bytes));
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
}

// Four 8x8 matrices of 16-bit elements; lanes 8i..8i+7 give the row addresses of matrix i, register i receives it.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D = A·B + D for one 16x8 tile: m16n8k16 on fp16/bf16 pairs, m16n8k8 on tf32.
template <class T> __device__ __forceinline__ void mma_16x8(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]);
template <> __device__ __forceinline__ void mma_16x8<__half>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void mma_16x8<__nv_bfloat16>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> __device__ __forceinline__ void mma_16x8<float>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#endif  // TRACEA_HOST_EMULATION

// fp32 -> tf32, rounding to nearest (ties away from zero): the tensor core ignores the low 13 mantissa bits, so adding
// half of their range first turns its truncation into rounding. Truncation alone would shrink every product.
__device__ __forceinline__ unsigned to_tf32(float x) { return __float_as_uint(x) + 0x1000u; }

}  // namespace tracea
