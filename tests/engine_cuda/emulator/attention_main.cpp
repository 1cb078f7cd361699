// Runs one compiled attention configuration on the CPU (see tracea_host_emulation.h, attention_emulation.h). Usage:
// attention_emulator DIR. DIR/launch.txt holds:
//   ints SEQ_Q SEQ_K HEADS KV_HEADS Q_SB Q_SH Q_SR KV_SB KV_SH KV_SR      (TRACEA_ATTENTION_PARAMS' ints)
//   buffers LSE_ELEMENTS WORKSPACE_BYTES                                      (0: no lse, no workspace)
//   kernel NAME GRID_X GRID_Y GRID_Z BLOCK_X                                  (one line per step, run in order)
// NAME is attention_fa2, attention_fa2_split or attention_fa2_combine (the last two: split-KV sources only). DIR/q.bin,
// k.bin, v.bin, out.bin hold the operands; out.bin (and lse.bin, NaN-poisoned) are written back. The workspace is
// NaN-poisoned too: a value read before a kernel wrote it shows in the output.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tracea_host_emulation.h"

extern "C" void attention_fa2(const void *q, const void *k, const void *v, void *out, float *lse, int seq_q,
                              int seq_k, int heads, int kv_heads, int q_sb, int q_sh, int q_sr, int kv_sb, int kv_sh,
                              int kv_sr) __attribute__((weak));
extern "C" void attention_fa2_split(const void *q, const void *k, const void *v, void *out, float *lse, int seq_q,
                                    int seq_k, int heads, int kv_heads, int q_sb, int q_sh, int q_sr, int kv_sb,
                                    int kv_sh, int kv_sr, float *workspace) __attribute__((weak));
extern "C" void attention_fa2_combine(const void *q, const void *k, const void *v, void *out, float *lse, int seq_q,
                                      int seq_k, int heads, int kv_heads, int q_sb, int q_sh, int q_sr, int kv_sb,
                                      int kv_sh, int kv_sr, float *workspace) __attribute__((weak));

namespace {

std::vector<unsigned char> read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) emu::fail(("cannot read " + path).c_str());
  return std::vector<unsigned char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

unsigned char *aligned_copy(const std::vector<unsigned char> &bytes) {
  auto *p = static_cast<unsigned char *>(std::aligned_alloc(256, (bytes.size() + 255) / 256 * 256));
  std::memcpy(p, bytes.data(), bytes.size());
  return p;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) emu::fail("usage: attention_emulator DIR");
  const std::string dir = argv[1];
  std::ifstream launch(dir + "/launch.txt");
  std::string line, word;
  int ints[10] = {};
  size_t lse_elements = 0, workspace_bytes = 0;
  std::getline(launch, line);
  std::istringstream first(line);
  first >> word;
  for (int &i : ints) first >> i;
  std::getline(launch, line);
  std::istringstream second(line);
  second >> word >> lse_elements >> workspace_bytes;
  const auto out_bytes = read_file(dir + "/out.bin");
  unsigned char *q = aligned_copy(read_file(dir + "/q.bin")), *k = aligned_copy(read_file(dir + "/k.bin"));
  unsigned char *v = aligned_copy(read_file(dir + "/v.bin")), *out = aligned_copy(out_bytes);
  float *lse = nullptr, *workspace = nullptr;
  if (lse_elements) {
    lse = static_cast<float *>(std::aligned_alloc(256, (lse_elements * 4 + 255) / 256 * 256));
    std::memset(lse, 0xFF, lse_elements * 4);
  }
  if (workspace_bytes) {
    workspace = static_cast<float *>(std::aligned_alloc(256, (workspace_bytes + 255) / 256 * 256));
    std::memset(workspace, 0xFF, workspace_bytes);
  }
  while (std::getline(launch, line)) {
    std::istringstream step(line);
    std::string name;
    unsigned grid_x = 0, grid_y = 0, grid_z = 0;
    int threads = 0;
    step >> word >> name >> grid_x >> grid_y >> grid_z >> threads;
    if (word != "kernel") continue;
    const bool split = name == "attention_fa2_split", combine = name == "attention_fa2_combine";
    if (!(name == "attention_fa2" ? attention_fa2 != nullptr : split ? attention_fa2_split != nullptr
                                                              : combine && attention_fa2_combine != nullptr))
      emu::fail(("the source has no kernel " + name).c_str());
    emu::block_dim = dim3{unsigned(threads), 1, 1};
    emu::grid_dim = dim3{grid_x, grid_y, grid_z};
    for (unsigned zb = 0; zb < grid_z; ++zb)
      for (unsigned yb = 0; yb < grid_y; ++yb)
        for (unsigned xb = 0; xb < grid_x; ++xb) {
          emu::Block block(threads);
          std::vector<emu::Warp> warps((threads + emu::WARP - 1) / emu::WARP);
          std::vector<std::thread> pool;
          for (int th = 0; th < threads; ++th)
            pool.emplace_back([&, th] {
              emu::thread_index = dim3{unsigned(th), 0, 0};
              emu::block_index = dim3{xb, yb, zb};
              emu::block = &block;
              emu::warp = &warps[th / emu::WARP];
              if (split)
                attention_fa2_split(q, k, v, out, lse, ints[0], ints[1], ints[2], ints[3], ints[4], ints[5], ints[6],
                                    ints[7], ints[8], ints[9], workspace);
              else if (combine)
                attention_fa2_combine(q, k, v, out, lse, ints[0], ints[1], ints[2], ints[3], ints[4], ints[5],
                                      ints[6], ints[7], ints[8], ints[9], workspace);
              else
                attention_fa2(q, k, v, out, lse, ints[0], ints[1], ints[2], ints[3], ints[4], ints[5], ints[6],
                              ints[7], ints[8], ints[9]);
            });
          for (auto &worker : pool) worker.join();
        }
  }
  std::ofstream(dir + "/out.bin", std::ios::binary)
      .write(reinterpret_cast<const char *>(out), static_cast<std::streamsize>(out_bytes.size()));
  if (lse) std::ofstream(dir + "/lse.bin", std::ios::binary).write(reinterpret_cast<const char *>(lse), lse_elements * 4);
  return 0;
}
