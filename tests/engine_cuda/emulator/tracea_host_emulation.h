// CPU stand-ins for the CUDA surface the GEMM templates use, so that the very same kernel code runs on a host
// without a GPU (tests only). Every CUDA thread of a block is a std::thread; __syncthreads is a block-wide barrier.
// The warp-collective PTX instructions (ldmatrix, mma.sync) are emulated from their definitions in the PTX ISA: each
// lane publishes its operands, the warp meets at a barrier, and each lane computes what the hardware gives it.
// cp.async copies at once (its zero-fill included), so commit/wait are no-ops here.
#pragma once

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

using std::fma;
using std::max;
using std::min;

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct int2 {
  int x, y;
};
inline int2 make_int2(int x, int y) { return int2{x, y}; }
struct alignas(8) float2 {
  float x, y;
};

inline unsigned __float_as_uint(float x) {
  unsigned u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

struct __half {
  _Float16 value;
};
struct __nv_bfloat16 {
  unsigned short bits;
};
inline float __half2float(__half h) { return static_cast<float>(h.value); }
inline __half __float2half_rn(float x) { return __half{static_cast<_Float16>(x)}; }
inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float(unsigned(h.bits) << 16); }
inline __nv_bfloat16 __float2bfloat16_rn(float x) {
  const unsigned u = __float_as_uint(x);
  return __nv_bfloat16{static_cast<unsigned short>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)};
}

inline float atomicAdd(float *address, float value) { return std::atomic_ref<float>(*address).fetch_add(value); }
inline int atomicAdd(int *address, int value) { return std::atomic_ref<int>(*address).fetch_add(value); }
// Blocks run one after another here, so a fence has nothing to order across blocks; it still orders this thread's
// memory operations as on the GPU.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
// Integer intrinsics (conv2d's fast divmod): the high 32 bits of a 32 x 32-bit product; leading zero bits.
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline int __clz(unsigned x) { return x == 0 ? 32 : __builtin_clz(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return expf(x); }

namespace emu {

constexpr int WARP = 32;

[[noreturn]] inline void fail(const char *what) {
  std::fprintf(stderr, "emulated fault: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

struct Warp {
  std::barrier<> meet{WARP};
  unsigned address[WARP];
  unsigned a[WARP][4];
  unsigned b[WARP][2];
};

struct Block {
  explicit Block(int threads) : meet(threads) {}
  std::barrier<> meet;
  std::atomic<int> vote{0};  // __syncthreads_or's
};

inline thread_local dim3 thread_index, block_index;
inline thread_local Block *block = nullptr;
inline thread_local Warp *warp = nullptr;
inline dim3 block_dim, grid_dim;

}  // namespace emu

#define threadIdx (emu::thread_index)
#define blockIdx (emu::block_index)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)

inline void __syncthreads() { emu::block->meet.arrive_and_wait(); }
// A barrier that returns whether any thread's predicate was non-zero: set, meet, read, meet; thread 0 clears the vote
// after the second meeting, before it can reach the next call's first one.
inline int __syncthreads_or(int predicate) {
  emu::Block &b = *emu::block;
  b.meet.arrive_and_wait();
  if (predicate) b.vote.store(1);
  b.meet.arrive_and_wait();
  const int any = b.vote.load();
  b.meet.arrive_and_wait();
  if (threadIdx.x == 0) b.vote.store(0);
  return any;
}

#ifdef TRACEA_HOST_EMULATION  // the kernel's translation unit (the launcher shares only what is above)
namespace tracea {

// Dynamic shared memory of the one block running at a time (blocks run one after another). The harness sizes it to
// the kernel's launch, so that a sanitizer build catches accesses past its end.
#ifndef EMULATED_SMEM_BYTES
#define EMULATED_SMEM_BYTES (256 * 1024)
#endif
alignas(128) inline unsigned char smem_raw[EMULATED_SMEM_BYTES];

inline unsigned smem_address(const void *p) {
  return static_cast<unsigned>(static_cast<const unsigned char *>(p) - smem_raw);
}

template <int BYTES> inline void cp_async(unsigned dst, const void *src, bool valid) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async moves 4, 8 or 16 bytes");
  if (dst % BYTES != 0) emu::fail("cp.async: misaligned shared address");
  if (valid && reinterpret_cast<std::uintptr_t>(src) % BYTES != 0) emu::fail("cp.async: misaligned global address");
  if (valid)
    std::memcpy(smem_raw + dst, src, BYTES);
  else
    std::memset(smem_raw + dst, 0, BYTES);
}
inline void cp_async_commit() {}
template <int PENDING> inline void cp_async_wait() {}

inline unsigned short smem_u16(unsigned address) {
  unsigned short v;
  std::memcpy(&v, smem_raw + address, 2);
  return v;
}

// ldmatrix .x4: lanes 8i..8i+7 address the 8 rows (16 bytes each) of matrix i; lane l receives in register i the
// elements (row l/4, columns 2(l%4), 2(l%4)+1) of matrix i, or with .trans the elements (rows 2(l%4), 2(l%4)+1,
// column l/4).
inline void ldmatrix_emulated(unsigned (&r)[4], unsigned address, bool trans) {
  emu::Warp &w = *emu::warp;
  const int lane = threadIdx.x % emu::WARP;
  if (address % 16 != 0) emu::fail("ldmatrix: row address not 16-byte aligned");
  w.address[lane] = address;
  w.meet.arrive_and_wait();
  for (int i = 0; i < 4; ++i) {
    unsigned short e[2];
    for (int j = 0; j < 2; ++j) {
      if (!trans)
        e[j] = smem_u16(w.address[8 * i + lane / 4] + 2 * (2 * (lane % 4) + j));
      else
        e[j] = smem_u16(w.address[8 * i + 2 * (lane % 4) + j] + 2 * (lane / 4));
    }
    r[i] = unsigned(e[0]) | (unsigned(e[1]) << 16);
  }
  w.meet.arrive_and_wait();
}
inline void ldmatrix_x4(unsigned (&r)[4], unsigned address) { ldmatrix_emulated(r, address, false); }
inline void ldmatrix_x4_trans(unsigned (&r)[4], unsigned address) { ldmatrix_emulated(r, address, true); }

inline float half_bits(unsigned short bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}
inline float bf16_bits(unsigned short bits) { return __uint_as_float(unsigned(bits) << 16); }
inline float tf32_bits(unsigned bits) { return __uint_as_float(bits & 0xFFFFE000u); }  // the low 13 bits are ignored

// The tensor cores' fp32 sums: exact products, added and truncated toward zero (Fasi et al., "Numerical behavior of
// NVIDIA tensor cores", 2021), so that a long chain of them drifts as on the GPU (3xTF32 needs per-step sums).
inline float toward_zero(double x) {
  const float f = static_cast<float>(x);
  return std::fabs(static_cast<double>(f)) > std::fabs(x) ? std::nextafter(f, 0.0f) : f;
}

// mma.sync m16n8kK, row.col, fp32 accumulate: D(16x8) += A(16xK)·B(Kx8). Fragment layouts (g = lane/4, t = lane%4):
//   m16n8k16 (16-bit pairs, lower index in the low half): a0 (g, 2t..), a1 (g+8, 2t..), a2 (g, 2t+8..),
//     a3 (g+8, 2t+8..); b0 (k 2t.., n g), b1 (k 2t+8.., n g)
//   m16n8k8 tf32: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (k t, n g), b1 (k t+4, n g)
//   D: d0 (g, 2t), d1 (g, 2t+1), d2 (g+8, 2t), d3 (g+8, 2t+1)
template <class T> void mma_16x8(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  emu::Warp &w = *emu::warp;
  const int lane = threadIdx.x % emu::WARP;
  std::memcpy(w.a[lane], a, sizeof a);
  std::memcpy(w.b[lane], b, sizeof b);
  w.meet.arrive_and_wait();
  constexpr bool tf32 = std::is_same_v<T, float>;
  constexpr int K = tf32 ? 8 : 16;
  float A[16][K], B[K][8];
  for (int l = 0; l < emu::WARP; ++l) {
    const int g = l / 4, t = l % 4;
    if constexpr (tf32) {
      A[g][t] = tf32_bits(w.a[l][0]), A[g + 8][t] = tf32_bits(w.a[l][1]);
      A[g][t + 4] = tf32_bits(w.a[l][2]), A[g + 8][t + 4] = tf32_bits(w.a[l][3]);
      B[t][g] = tf32_bits(w.b[l][0]), B[t + 4][g] = tf32_bits(w.b[l][1]);
    } else {
      auto value = [](unsigned reg, int half) {
        const unsigned short bits = static_cast<unsigned short>(half ? reg >> 16 : reg & 0xFFFFu);
        return std::is_same_v<T, __half> ? half_bits(bits) : bf16_bits(bits);
      };
      for (int h = 0; h < 2; ++h) {
        A[g][2 * t + h] = value(w.a[l][0], h), A[g + 8][2 * t + h] = value(w.a[l][1], h);
        A[g][2 * t + 8 + h] = value(w.a[l][2], h), A[g + 8][2 * t + 8 + h] = value(w.a[l][3], h);
        B[2 * t + h][g] = value(w.b[l][0], h), B[2 * t + 8 + h][g] = value(w.b[l][1], h);
      }
    }
  }
  w.meet.arrive_and_wait();
  const int g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
    double sum = d[e];
    for (int k = 0; k < K; ++k) sum += static_cast<double>(A[row][k]) * B[k][col];
    d[e] = toward_zero(sum);
  }
}

}  // namespace tracea
#endif  // TRACEA_HOST_EMULATION
