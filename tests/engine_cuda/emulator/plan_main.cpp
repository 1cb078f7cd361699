// Runs any family's compiled kernels on the CPU by following a launch plan (see tracea_host_emulation.h and
// harness.py's run_plan). Usage: plan_emulator DIR. DIR/launch.txt holds one item per line:
//   buffer INDEX BYTES [FILE]        device memory: INDEX's bytes, read from DIR/FILE when given (else zeros; FILE "-":
//                                    0xFF bytes, garbage that only a memset clears)
//   load INDEX FILE                  buffer INDEX read again from DIR/FILE (an output poisoned again between calls)
//   memset INDEX BYTES               zeros the first BYTES of buffer INDEX
//   kernel NAME GX GY GZ BX ARGS...  a launch; each argument is pINDEX (a buffer's address, p-1: null), pINDEX+BYTES
//                                    (an address inside a buffer: a plan's scratch in the workspace) or iVALUE
//   write INDEX FILE                 at the end, buffer INDEX is written to DIR/FILE
// The kernels' signatures come from the program's shim (harness.py writes it from the plan): tracea_emulated_call.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tracea_host_emulation.h"

// Calls kernel `name` for the current emulated thread with its arguments (addresses and ints, in signature order).
void tracea_emulated_call(const std::string &name, const std::vector<std::intptr_t> &args);

namespace {

struct Memory {
  unsigned char *data = nullptr;
  size_t size = 0;
};

void run_blocks(const std::string &name, dim3 grid, int threads, const std::vector<std::intptr_t> &args) {
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
            tracea_emulated_call(name, args);
          });
        for (auto &th : pool) th.join();
      }
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) emu::fail("usage: plan_emulator DIR");
  const std::string dir = argv[1];
  std::ifstream launch(dir + "/launch.txt");
  if (!launch) emu::fail("no launch.txt");
  std::map<int, Memory> memory;
  std::string line;
  while (std::getline(launch, line)) {
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    if (kind == "buffer") {
      int index = 0;
      size_t bytes = 0;
      std::string file;
      words >> index >> bytes >> file;
      Memory m{static_cast<unsigned char *>(std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256)), bytes};
      std::memset(m.data, file == "-" ? 0xFF : 0, bytes);
      if (!file.empty() && file != "-") {
        std::ifstream in(dir + "/" + file, std::ios::binary);
        if (!in) emu::fail(("cannot read " + file).c_str());
        in.read(reinterpret_cast<char *>(m.data), static_cast<std::streamsize>(bytes));
      }
      memory[index] = m;
    } else if (kind == "load") {
      int index = 0;
      std::string file;
      words >> index >> file;
      std::ifstream in(dir + "/" + file, std::ios::binary);
      if (!in) emu::fail(("cannot read " + file).c_str());
      in.read(reinterpret_cast<char *>(memory.at(index).data), static_cast<std::streamsize>(memory.at(index).size));
    } else if (kind == "memset") {
      int index = 0;
      size_t bytes = 0;
      words >> index >> bytes;
      std::memset(memory.at(index).data, 0, bytes);
    } else if (kind == "kernel") {
      std::string name, arg;
      dim3 grid;
      int threads = 0;
      words >> name >> grid.x >> grid.y >> grid.z >> threads;
      std::vector<std::intptr_t> args;
      while (words >> arg) {
        const long long v = std::atoll(arg.c_str() + 1);
        const size_t plus = arg.find('+');
        const long long offset = plus == std::string::npos ? 0 : std::atoll(arg.c_str() + plus + 1);
        args.push_back(arg[0] == 'i' ? static_cast<std::intptr_t>(v)
                       : v < 0      ? 0
                                    : reinterpret_cast<std::intptr_t>(memory.at(static_cast<int>(v)).data + offset));
      }
      run_blocks(name, grid, threads, args);
    } else if (kind == "write") {
      int index = 0;
      std::string file;
      words >> index >> file;
      std::ofstream out(dir + "/" + file, std::ios::binary);
      out.write(reinterpret_cast<const char *>(memory.at(index).data), static_cast<std::streamsize>(memory.at(index).size));
    }
  }
  for (auto &entry : memory) std::free(entry.second.data);
  return 0;
}
