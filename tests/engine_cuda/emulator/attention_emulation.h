// CPU stand-ins for the warp shuffles and the warp barrier of kernels/cuda/attention_fa2.cuh (tests only; see
// tracea_host_emulation.h): each lane publishes its value, the warp meets, each lane reads its partner's.
#pragma once

#include "tracea_host_emulation.h"

inline void __syncwarp() { emu::warp->meet.arrive_and_wait(); }

namespace tracea {

inline float quad_xor(float x, int mask) {
  emu::Warp &w = *emu::warp;
  const int lane = threadIdx.x % emu::WARP;
  w.address[lane] = __float_as_uint(x);  // the ldmatrix exchange slots, free between collectives
  w.meet.arrive_and_wait();
  const float y = __uint_as_float(w.address[lane ^ mask]);
  w.meet.arrive_and_wait();
  return y;
}

}  // namespace tracea
