// Runs one compiled lowrank-mlp configuration on the CPU (see tracea_host_emulation.h). Usage: lowrank_emulator DIR
// DIR/launch.txt lists the problem and the launch sequence, one item per line:
//   dims M K R N LDT                 (K = d_in, R = rank, N = d_out; LDT: the leading dimension of the scratch T)
//   scratch BYTES                    (the two-GEMM family's T, NaN-poisoned)
//   kernel NAME GRID_X GRID_Y GRID_Z BLOCK_X   (NAME: lowrank_fused, lowrank_xu or lowrank_tv)
// DIR/x.bin, u.bin, v.bin, y.bin and, when present, bias.bin and residual.bin hold the operands; y.bin is rewritten.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tracea_host_emulation.h"

#define PARAMS                                                                                                     \
  const void *x, const void *u, const void *v, const void *bias, const void *residual, void *y, void *t, int m, \
      int k, int r, int n, int ldt
extern "C" void lowrank_fused(PARAMS) __attribute__((weak));
extern "C" void lowrank_xu(PARAMS) __attribute__((weak));
extern "C" void lowrank_tv(PARAMS) __attribute__((weak));

namespace {

std::vector<unsigned char> read_file(const std::string &path, bool required) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (required) emu::fail(("cannot read " + path).c_str());
    return {};
  }
  return std::vector<unsigned char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A copy in a 256-byte aligned buffer, as cudaMalloc would place it (nullptr for an absent file).
unsigned char *aligned_copy(const std::vector<unsigned char> &bytes) {
  if (bytes.empty()) return nullptr;
  auto *p = static_cast<unsigned char *>(std::aligned_alloc(256, (bytes.size() + 255) / 256 * 256));
  std::memcpy(p, bytes.data(), bytes.size());
  return p;
}

using Kernel = void (*)(PARAMS);

void run_kernel(Kernel kernel, dim3 grid, int threads, void *const (&ptrs)[7], const int (&dims)[5]) {
  emu::block_dim = dim3{unsigned(threads), 1, 1};
  emu::grid_dim = grid;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned yb = 0; yb < grid.y; ++yb)
      for (unsigned xb = 0; xb < grid.x; ++xb) {
        emu::Block block(threads);
        std::vector<emu::Warp> warps((threads + emu::WARP - 1) / emu::WARP);
        std::vector<std::thread> pool;
        pool.reserve(threads);
        for (int th = 0; th < threads; ++th)
          pool.emplace_back([&, th] {
            emu::thread_index = dim3{unsigned(th), 0, 0};
            emu::block_index = dim3{xb, yb, z};
            emu::block = &block;
            emu::warp = &warps[th / emu::WARP];
            kernel(ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], ptrs[6], dims[0], dims[1], dims[2], dims[3],
                   dims[4]);
          });
        for (auto &worker : pool) worker.join();
      }
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) emu::fail("usage: lowrank_emulator DIR");
  const std::string dir = argv[1];
  std::ifstream launch(dir + "/launch.txt");
  if (!launch) emu::fail("no launch.txt");
  const std::vector<unsigned char> y_bytes = read_file(dir + "/y.bin", true);
  void *ptrs[7] = {aligned_copy(read_file(dir + "/x.bin", true)), aligned_copy(read_file(dir + "/u.bin", true)),
                   aligned_copy(read_file(dir + "/v.bin", true)), aligned_copy(read_file(dir + "/bias.bin", false)),
                   aligned_copy(read_file(dir + "/residual.bin", false)), aligned_copy(y_bytes), nullptr};
  int dims[5] = {0, 0, 0, 0, 0};
  std::string line;
  while (std::getline(launch, line)) {
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    if (kind == "dims") {
      for (int &d : dims) words >> d;
    } else if (kind == "scratch") {
      size_t bytes = 0;
      words >> bytes;
      ptrs[6] = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
      std::memset(ptrs[6], 0xFF, bytes);  // NaN in every float type: a value the kernel fails to write shows
    } else if (kind == "kernel") {
      std::string name;
      dim3 grid;
      int threads = 0;
      words >> name >> grid.x >> grid.y >> grid.z >> threads;
      Kernel kernel = name == "lowrank_fused" ? lowrank_fused : name == "lowrank_xu" ? lowrank_xu : lowrank_tv;
      if (kernel == nullptr || (name != "lowrank_fused" && name != "lowrank_xu" && name != "lowrank_tv"))
        emu::fail(("the program has no kernel " + name).c_str());
      run_kernel(kernel, grid, threads, ptrs, dims);
    }
  }
  std::ofstream out(dir + "/y.bin", std::ios::binary);
  out.write(static_cast<const char *>(ptrs[5]), static_cast<std::streamsize>(y_bytes.size()));
  return 0;
}
