// Runs one compiled GEMM configuration on the CPU (see tracea_host_emulation.h). Usage: emulator DIR
// DIR/launch.txt lists the problem and the launch sequence, one item per line:
//   dims M N K LDA LDB LDC ELEM_BYTES        (ELEM_BYTES: bytes per element of A, B, C, bias, residual)
//   memset WORKSPACE_BYTES
//   kernel NAME GRID_X GRID_Y GRID_Z BLOCK_X (NAME: gemm_main or gemm_splitk_reduce)
// DIR/a.bin, b.bin, c.bin and, when present, bias.bin and residual.bin hold the operands; c.bin is rewritten.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tracea_host_emulation.h"

#define PARAMS                                                                                                  \
  const void *a, const void *b, void *c, const void *bias, const void *residual, float *workspace, int m, int n, \
      int k, int lda, int ldb, int ldc
extern "C" void gemm_main(PARAMS);
extern "C" void gemm_splitk_reduce(PARAMS) __attribute__((weak));

namespace {

// A file's bytes in a 256-byte aligned buffer, as cudaMalloc would place them.
struct Buffer {
  unsigned char *data = nullptr;
  size_t size = 0;
  Buffer() = default;
  explicit Buffer(size_t bytes) : data(static_cast<unsigned char *>(std::aligned_alloc(256, (bytes + 255) / 256 * 256))),
                                  size(bytes) {}
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  Buffer(Buffer &&other) noexcept : data(other.data), size(other.size) { other.data = nullptr; }
  ~Buffer() { std::free(data); }
  bool empty() const { return data == nullptr; }
};

Buffer read_file(const std::string &path, bool required) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (required) emu::fail(("cannot read " + path).c_str());
    return Buffer();
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Buffer out(bytes.size());
  std::memcpy(out.data, bytes.data(), bytes.size());
  return out;
}

using Kernel = void (*)(PARAMS);

void run_kernel(Kernel kernel, dim3 grid, int threads, const std::vector<void *> &ptrs, const int (&dims)[6]) {
  emu::block_dim = dim3{unsigned(threads), 1, 1};
  emu::grid_dim = grid;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        emu::Block block(threads);
        std::vector<emu::Warp> warps((threads + emu::WARP - 1) / emu::WARP);
        std::vector<std::thread> pool;
        pool.reserve(threads);
        for (int t = 0; t < threads; ++t)
          pool.emplace_back([&, t] {
            emu::thread_index = dim3{unsigned(t), 0, 0};
            emu::block_index = dim3{x, y, z};
            emu::block = &block;
            emu::warp = &warps[t / emu::WARP];
            kernel(ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], static_cast<float *>(ptrs[5]), dims[0], dims[1],
                   dims[2], dims[3], dims[4], dims[5]);
          });
        for (auto &th : pool) th.join();
      }
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) emu::fail("usage: emulator DIR");
  const std::string dir = argv[1];
  std::ifstream launch(dir + "/launch.txt");
  if (!launch) emu::fail("no launch.txt");
  Buffer a = read_file(dir + "/a.bin", true), b = read_file(dir + "/b.bin", true), c = read_file(dir + "/c.bin", true),
         bias = read_file(dir + "/bias.bin", false), residual = read_file(dir + "/residual.bin", false);
  std::vector<float> workspace;  // the split-K partial sums
  int dims[6] = {0, 0, 0, 0, 0, 0}, elem_bytes = 0;
  std::string line;
  while (std::getline(launch, line)) {
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    if (kind == "dims") {
      for (int &d : dims) words >> d;
      words >> elem_bytes;
    } else if (kind == "memset") {
      size_t bytes = 0;
      words >> bytes;
      workspace.assign(bytes / 4, 0.0f);  // the memset: zeros before the main kernel
    } else if (kind == "kernel") {
      std::string name;
      dim3 grid;
      int threads = 0;
      words >> name >> grid.x >> grid.y >> grid.z >> threads;
      Kernel kernel = name == "gemm_main" ? gemm_main : gemm_splitk_reduce;
      if (kernel == nullptr) emu::fail(("the program has no kernel " + name).c_str());
      std::vector<void *> ptrs = {a.data, b.data, c.data, bias.data, residual.data,
                                  workspace.empty() ? nullptr : workspace.data()};
      run_kernel(kernel, grid, threads, ptrs, dims);
    }
  }
  std::ofstream out(dir + "/c.bin", std::ios::binary);
  out.write(reinterpret_cast<const char *>(c.data), static_cast<std::streamsize>(c.size));
  return 0;
}
