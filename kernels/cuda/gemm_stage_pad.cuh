// Operand staging for the engine families (gemm_simt.cuh, gemm_mma.cuh), configurations with stage = 1: a copy that
// runs before gemm_main, on the same stream, of an operand whose rows are not a multiple of the configuration's
// vector width (K, or N of B in layout nn), into scratch whose leading dimension the host rounded up to 128 bytes
// (docs/kernel-abi.md, "Staging"). The main kernel then reads the copy with vector loads; a vector that starts inside
// the true K (or N) and runs past it reads the zeros written here, which add nothing to a product (or fill columns of
// C that are never stored). The main kernels' remarks that K "is a multiple of VEC" hold for these padded rows.
//
//   dst[r][c] = src[r][c] for c < cols, 0 for cols <= c < ld_dst       (r < rows)
//
// One block of 256 threads per (row, span of STAGE_SPAN columns): grid (rows, ceil(cols / STAGE_SPAN)); the threads
// step through the span 256 columns at a time, so the grid's y stays far below its limit of 65535 for any int size.
// STAGE_SPAN is a multiple of every padded leading dimension's step (128 bytes: 16 to 64 elements), so the last block
// of a row reaches ld_dst. Element by element, consecutive threads on consecutive addresses: coalesced both ways for
// any leading dimension.
#pragma once

namespace tracea {

constexpr int STAGE_THREADS = 256;
constexpr int STAGE_SPAN = 16 * STAGE_THREADS;

template <class T>
__device__ __forceinline__ void stage_pad(const T *__restrict__ src, T *__restrict__ dst, int rows, int cols,
                                          int ld_src, int ld_dst) {
  const int r = blockIdx.x;
  if (r >= rows) return;
  const long long first = static_cast<long long>(blockIdx.y) * STAGE_SPAN, span_end = first + STAGE_SPAN;
  const int end = span_end < ld_dst ? static_cast<int>(span_end) : ld_dst;
  for (int c = static_cast<int>(first) + threadIdx.x; c < end; c += STAGE_THREADS) {
    const T value = c < cols ? src[static_cast<size_t>(r) * ld_src + c] : T{};  // T{}: zero, whatever the type
    dst[static_cast<size_t>(r) * ld_dst + c] = value;
  }
}

}  // namespace tracea

#define TRACEA_STAGE_PARAMS \
  const void *__restrict__ src, void *__restrict__ dst, int rows, int cols, int ld_src, int ld_dst
#define TRACEA_STAGE_ARGS(T) \
  static_cast<const T *>(src), static_cast<T *>(dst), rows, cols, ld_src, ld_dst
