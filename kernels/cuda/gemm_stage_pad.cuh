// Operand staging for the engine families (gemm_simt.cuh, gemm_mma.cuh), configurations with stage = 1: a copy that
// runs before gemm_main, on the same stream, of an operand whose rows are not a multiple of the configuration's
// vector width (K, or N of B in layout nn), into scratch whose leading dimension the host rounded up to 128 bytes
// (docs/kernel-abi.md, "Staging"). The main kernel then reads the copy with vector loads; a vector that starts inside
// the true K (or N) and runs past it reads the zeros written here, which add nothing to a product (or fill columns of
// C that are never stored). The main kernels' remarks that K "is a multiple of VEC" hold for these padded rows.
//
//   dst[r][c] = src[r][c] for c < cols, 0 for cols <= c < ld_dst       (r < rows)
//
// One block of 256 threads per (row, 256 columns): grid (rows, ceil(cols / 256)); 256 is a multiple of every padded
// leading dimension's step (128 bytes: 16 to 64 elements), so the last block of a row reaches ld_dst. The grid's y
// limit (65535) allows rows of 65535 * 256 elements, 16 times the largest size a problem may have (2^20); an exported
// runtime called with longer ones gets the launch's error. Element by element, consecutive threads on consecutive
// addresses: coalesced both ways for any leading dimension.
#pragma once

namespace tracea {

constexpr int STAGE_THREADS = 256;

template <class T>
__device__ __forceinline__ void stage_pad(const T *__restrict__ src, T *__restrict__ dst, int rows, int cols,
                                          int ld_src, int ld_dst) {
  const int r = blockIdx.x, c = blockIdx.y * STAGE_THREADS + threadIdx.x;
  if (r >= rows || c >= ld_dst) return;
  const T value = c < cols ? src[static_cast<size_t>(r) * ld_src + c] : T{};  // T{}: zero, whatever the type
  dst[static_cast<size_t>(r) * ld_dst + c] = value;
}

}  // namespace tracea

#define TRACEA_STAGE_PARAMS \
  const void *__restrict__ src, void *__restrict__ dst, int rows, int cols, int ld_src, int ld_dst
#define TRACEA_STAGE_ARGS(T) \
  static_cast<const T *>(src), static_cast<T *>(dst), rows, cols, ld_src, ld_dst
