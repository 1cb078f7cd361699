"""`tracea export attention` without a GPU: an export of the issue's acceptance shape (bf16, head dim 128, causal,
a configuration file, sm_90, NVRTC), a valid manifest that says the configuration is unverified, a C header that
compiles as strict C, an example that builds and says when there is no driver, and the exported runtime run against
the fake driver through `tracea::attention(q, k, v, out, params)` with the seed's TensorViews: one launch over
(query blocks, batch·heads) with the plan's block and shared memory and the views' strides, and bad calls refused."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
from export_helpers import build, cli, fields, needs_nvrtc, read_manifest, run_probe, run_with_fake

from tracea_cli.export.defaults import load_defaults
from tracea_cli.export.elf import function_symbols
from tracea_cli.export.manifest import COMPILED_ONLY, validate

pytestmark = [needs_nvrtc, pytest.mark.timeout(600)]

CONFIG = {"family": "fa2", "block_m": 128, "block_n": 64, "warps": 8, "stages": 2}

PROBE = r"""
// Calls an attention export through tracea.hpp the way a program would, against the fake driver.
//   probe B H L H_KV L_K CASE   (CASE: ok, blhd, lse, not-causal, bad-kv; ws: ok with the workspace it asks for)
#include EXPORT_HEADER
#include "tracea.hpp"
#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc != 7) return 4;
  const int b = std::atoi(argv[1]), h = std::atoi(argv[2]), l = std::atoi(argv[3]), hkv = std::atoi(argv[4]);
  const int lk = std::atoi(argv[5]), d = 128;
  const std::string what = argv[6];
  const tracea_driver* cu = nullptr;
  if (tracea_driver_get(&cu) != TRACEA_OK) return 3;
  CUdeviceptr q = 0, k = 0, v = 0, out = 0, lse = 0;
  cu->mem_alloc(&q, size_t(b) * h * l * d * 2);
  cu->mem_alloc(&k, size_t(b) * hkv * lk * d * 2);
  cu->mem_alloc(&v, size_t(b) * hkv * lk * d * 2);
  cu->mem_alloc(&out, size_t(b) * h * l * d * 2);
  cu->mem_alloc(&lse, size_t(b) * h * l * 4);
  using tracea::TensorView;
  const tracea::DType bf16 = tracea::DType::BFloat16;
  auto view = [&](CUdeviceptr p, int heads, int rows) {
    void* data = reinterpret_cast<void*>(p);
    if (what == "blhd")
      return TensorView(data, {b, heads, rows, d}, {int64_t(rows) * heads * d, d, int64_t(heads) * d, 1}, bf16, 0);
    return TensorView(data, {b, heads, rows, d}, bf16, 0);
  };
  tracea::AttentionParams params;
  params.causal = what != "not-causal";
  if (what == "lse") params.lse = TensorView(reinterpret_cast<void*>(lse), {b, h, l}, tracea::DType::fp32, 0);
  const int kv = what == "bad-kv" ? hkv + 1 : hkv;
  if (what == "ws") {
    params.workspace_bytes = tracea::attention_workspace_bytes(view(q, h, l), view(k, kv, lk), view(v, kv, lk),
                                                               view(out, h, l), params);
    CUdeviceptr ws = 0;
    cu->mem_alloc(&ws, params.workspace_bytes);
    params.workspace = reinterpret_cast<void*>(ws);
    std::fprintf(stderr, "probe: workspace=%llu bytes=%zu\n", (unsigned long long)ws, params.workspace_bytes);
  }
  const tracea::Status s = tracea::attention(view(q, h, l), view(k, kv, lk), view(v, kv, lk), view(out, h, l), params);
  std::fprintf(stderr, "probe: q=%llu k=%llu v=%llu out=%llu\n", (unsigned long long)q, (unsigned long long)k,
               (unsigned long long)v, (unsigned long long)out);
  std::printf("status=%d %s\n", int(s), tracea::status_string(s));
  return 0;
}
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """bf16, B 4, H 16, L 4096, head dim 128, causal, the configuration from a file, sm_90."""
    tmp = tmp_path_factory.mktemp("attention-export")
    (tmp / "config.json").write_text(json.dumps(CONFIG))
    result = cli(["attention", "--batch", "4", "--heads", "16", "--seq", "4096", "--head-dim", "128", "--dtype",
                  "bf16", "--causal", "--backend", "cuda", "--arch", "sm_90", "--config", str(tmp / "config.json"),
                  "--out", str(tmp / "out")], tmp)
    assert result.exit_code == 0, result.output
    return tmp / "out"


def probe(folder: Path, toolchain) -> Path:
    doc = read_manifest(folder)
    (folder / "probe.cpp").write_text(PROBE)
    return build(toolchain["cxx"], [str(folder / "probe.cpp")], folder / "probe", [str(folder), toolchain["include"]],
                 "-std=c++17", "-Wall", "-Wextra", "-Werror", f'-DEXPORT_HEADER="{doc["files"]["c_header"]}"',
                 "-ldl", "-lpthread")


def launches(log: list[str]) -> list[dict[str, str]]:
    return [fields(line) for line in log if line.startswith("launch ")]


def test_the_export_is_valid_compiled_only_and_holds_its_kernel(exported):
    doc = read_manifest(exported)
    assert validate(doc) == [] and doc["op"] == "attention" and doc["dtype"] == "bf16"
    assert (doc["causal"], doc["layout"], doc["lse"]) == (True, "bhld", False)
    assert doc["shape"] == [{"batch": 4, "heads": 16, "seq": 4096, "head_dim": 128, "kv_heads": 16, "seq_k": 4096}]
    (entry,) = doc["verification"]
    assert entry["status"] == COMPILED_ONLY and entry["device"] is None and doc["measurement"] is None
    (launch,) = doc["launch"]
    assert launch["valid_for"]["head_dim_min"] == launch["valid_for"]["head_dim_max"] == 128  # compiled in
    (cubin,) = [k["file"] for k in doc["kernels"]]
    assert function_symbols((exported / cubin).read_bytes()) >= {"attention_fa2"}
    assert doc["files"]["op_header"] == "tracea_attention.h" and (exported / "tracea_attention.h").is_file()
    # the export's header points to where whether (and where) it was verified is recorded: the manifest above
    assert "configuration was verified" in (exported / doc["files"]["c_header"]).read_text()


def test_the_c_header_compiles_as_strict_c(exported, toolchain, tmp_path):
    doc = read_manifest(exported)
    p = doc["prefix"]
    (tmp_path / "use.c").write_text(
        f'#include "{doc["files"]["c_header"]}"\n#include <stdio.h>\n'
        f"int main(void) {{ tracea_attention_args a; memset(&a, 0, sizeof a);\n"
        f'  printf("%d\\n", (int){p}_launch(&a, NULL)); {p}_unload(); return 0; }}\n')
    program = build(toolchain["cc"], [str(tmp_path / "use.c")], tmp_path / "use", [str(exported), toolchain["include"]],
                    "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ldl", "-lpthread")
    out = subprocess.run([str(program)], capture_output=True, text=True, timeout=30).stdout.split()
    assert out == ["7"]  # invalid argument for null pointers


def test_the_example_builds_and_says_when_there_is_no_driver(exported, toolchain, tmp_path):
    program = build(toolchain["cxx"], [str(exported / "example.cpp")], tmp_path / "example",
                    [str(exported), toolchain["include"]], "-std=c++17", "-Wall", "-Wextra", "-Werror", "-ldl",
                    "-lpthread")
    done = subprocess.run([str(program)], capture_output=True, text=True, timeout=30,
                          env={"LD_LIBRARY_PATH": str(tmp_path)})
    assert done.returncode == 2 and '"ok": false' in done.stdout and "driver" in done.stdout


def test_a_call_launches_the_kernel_as_its_plan_says(exported, toolchain, fake_driver):
    doc = read_manifest(exported)
    (step,) = next(e for e in doc["launch"] if e["arch"] == "sm_90")["description"]["steps"]
    program = probe(exported, toolchain)
    # another batch and a longer cache than the tuned shape: sizes are run-time arguments. (The export's dispatch
    # keeps seq, heads and kv_heads at the tuned values: see docs/attention.md, "Export".)
    out, log, pointers = run_probe(program, ["2", "16", "4096", "16", "5000", "ok"], fake_driver, cc="9.0")
    assert out == ["status=0 ok"], (out, log)
    (launch,) = launches(log)
    assert launch["name"] == "attention_fa2" and launch["grid"] == f"{math.ceil(4096 / 128)},32,1"
    assert launch["block"] == ",".join(map(str, step["block"])) and launch["smem"] == str(step["dynamic_smem_bytes"])
    # the fake driver prints the first parameters in GEMM's names: a..bias are q, k, v, out; then the ints from
    # seq_k on (m = seq_k, n = heads, k = kv_heads, lda..ldc = q's batch, head and row strides)
    assert [launch[n] for n in ("a", "b", "c", "bias")] == [pointers[n] for n in ("q", "k", "v", "out")]
    assert [launch[n] for n in ("m", "n", "k", "lda", "ldb", "ldc")] == \
        ["5000", "16", "16", str(16 * 4096 * 128), str(4096 * 128), "128"]


@pytest.mark.parametrize("case, status", [("blhd", "11"), ("lse", "11"), ("not-causal", "11"), ("bad-kv", "7")])
def test_calls_the_export_cannot_serve_are_refused(exported, toolchain, fake_driver, case, status):
    """Another layout, an lse output or no mask than the export was made for: not exported; K/V heads (17) that do
    not divide the query heads: an invalid argument. Nothing is launched."""
    program = probe(exported, toolchain)
    out, log = run_with_fake(program, ["2", "16", "4096", "16", "5000", case], fake_driver, cc="9.0")
    assert out[0].startswith(f"status={status} ") and not launches(log), (out, log)


def test_a_split_kv_export_asks_for_its_workspace_and_launches_both_kernels(toolchain, fake_driver, tmp_path):
    """Decode with kv_splits = 8: a call without the workspace is refused (nothing launched); with
    attention_workspace_bytes of it, the split kernel runs over (query blocks, batch·heads, chunks) and the combine
    over the rows."""
    config = {"family": "fa2", "block_m": 16, "block_n": 64, "warps": 1, "stages": 2, "kv_splits": 8}
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = cli(["attention", "--batch", "4", "--heads", "16", "--seq", "1", "--seq-k", "8192", "--head-dim", "128",
                  "--dtype", "bf16", "--causal", "--backend", "cuda", "--arch", "sm_90", "--config",
                  str(tmp_path / "config.json"), "--out", str(tmp_path / "out")], tmp_path)
    assert result.exit_code == 0, result.output
    program = probe(tmp_path / "out", toolchain)
    out, log = run_with_fake(program, ["2", "16", "1", "16", "5000", "ok"], fake_driver, cc="9.0")
    assert out[0].startswith("status=10 ") and not launches(log), (out, log)
    out, log, asked = run_probe(program, ["2", "16", "1", "16", "5000", "ws"], fake_driver, cc="9.0")
    assert out == ["status=0 ok"], (out, log)
    assert asked["bytes"] == str(8 * (128 + 1) * 4 * 1 * 2 * 16)  # kv_splits (D + 1) floats per row and head
    split, combine = launches(log)
    assert split["name"] == "attention_fa2_split" and split["grid"] == "1,32,8"
    assert combine["name"] == "attention_fa2_combine" and combine["grid"] == "1,32,1" and combine["block"] == "128,1,1"


def test_the_defaults_list_fa3_first_on_sm90_only_and_every_fa3_entry_is_the_first_valid_for_some_problem():
    """Export takes the first valid entry: an fa3 entry valid only where an earlier one is would never be taken."""
    from tracea_cli.backends.op_backend import OpBackend
    from tracea_cli.ops.attention import defaults
    from tracea_cli.ops.attention.problem import AttentionProblem
    from tracea_cli.target import arch_target

    assert {c["family"] for c in defaults.candidates("fp16", "sm_80")} == {"fa2"}
    listed = defaults.candidates("bf16", "sm_90")
    fa3 = [c for c in listed if c["family"] == "fa3"]
    assert fa3 and listed[:len(fa3)] == fa3 and listed[len(fa3):] == defaults.candidates("bf16", "sm_80")
    backend, target = OpBackend("attention", "cuda"), arch_target("sm_90a")
    # long sequences (three ring slots of 128 keys), 200 keys (two), a 64-row query block (one consumer)
    problems = [AttentionProblem(4, 16, seq, d, 16, seq_k, "bf16") for d in (64, 128) for seq, seq_k in
                ((4096, 4096), (200, 200), (64, 1000))]
    first = [next((c for c in fa3 if backend.why_invalid(p, target, c) is None), None) for p in problems]
    assert all(config in first for config in fa3), (fa3, first)


FA3_FIRST = {"family": "fa3", "block_n": 128, "stages": 3, "consumers": 2, "overlap": 1, "pingpong": 1}


# expected: the fa2 entry on sm_80, and on sm_90 the fa3 entry where fa3 applies (head dims 64 and 128 in (B, H, L, D),
# 64 query rows or more), else the same fa2 entry
@pytest.mark.parametrize("options, expected, on_sm90", [
    (["--seq", "4096", "--head-dim", "64", "--layout", "blhd", "--lse"], {"block_m": 128, "block_n": 64, "warps": 4},
     None),
    (["--seq", "4096", "--head-dim", "64"], {"block_m": 128, "block_n": 64, "warps": 4}, FA3_FIRST),
    (["--seq", "4096", "--head-dim", "128", "--causal"], {"block_m": 128, "block_n": 64, "warps": 8}, FA3_FIRST),
    (["--seq", "100", "--head-dim", "128", "--causal"], {"block_m": 128, "block_n": 64, "warps": 8},
     {"family": "fa3", "block_n": 128, "stages": 2, "consumers": 2, "overlap": 0, "pingpong": 1}),
    (["--seq", "64", "--seq-k", "1000", "--head-dim", "128"], {"block_m": 64, "block_n": 16, "warps": 4},
     {"family": "fa3", "block_n": 64, "stages": 2, "consumers": 1, "overlap": 0, "pingpong": 0}),
    (["--seq", "4096", "--head-dim", "256"], {"block_m": 64, "block_n": 16, "warps": 4}, None),
    (["--head-dim", "128", "--seq", "1", "--seq-k", "8192", "--kv-heads", "4"], {"block_m": 16, "block_n": 64,
                                                                                  "warps": 1}, None),
], ids=["d64-blhd-lse", "d64", "d128-causal", "d128-L100", "d128-query-block", "d256", "decode"])
def test_the_shipped_defaults_export_the_first_entry_that_fits_and_carry_its_verification(options, expected, on_sm90,
                                                                                        tmp_path):
    result = cli(["attention", "--batch", "4", "--heads", "16", *options, "--dtype", "fp16",
                  "--backend", "cuda", "--arch", "sm_80,sm_90", "--config", "default", "--out", str(tmp_path / "o")],
                 tmp_path)
    assert result.exit_code == 0, result.output
    doc = read_manifest(tmp_path / "o")
    assert validate(doc) == [] and len(doc["config"]) == 2  # one per architecture
    for choice in doc["config"]:
        assert choice["origin"] == "default", choice
        wanted = on_sm90 if on_sm90 and choice["arch"].startswith("sm_90") else {"family": "fa2", **expected}
        assert all(choice["values"][k] == v for k, v in wanted.items()), choice
    # Each architecture's record is its entry's in profiles/defaults/attention.json: sm_80 only ever compiled, sm_90
    # verified where `gemm_defaults.py verify --op attention` ran it on a Hopper GPU
    shipped = load_defaults("attention")["defaults"]
    for choice, record in zip(doc["config"], doc["verification"]):
        entry = shipped[int(choice["origin_detail"].rsplit("#", 1)[1])]
        assert record["status"] == entry["verification"]["status"], (choice, record)
        assert record["status"] == COMPILED_ONLY or choice["arch"].startswith("sm_90"), record
        assert "profiles/defaults/attention.json" in record["evidence"]


def test_a_packed_gqa_export_launches_one_block_per_kv_head_and_serves_its_own_group(toolchain, fake_driver,
                                                                                    tmp_path):
    """Decode with 4 query heads per K/V head packed (pack_gqa = 1): the split kernel runs over (query blocks of the
    packed rows, batch·kv_heads, chunks) by the plan's rules, the combine over every (batch·head, row) as unpacked;
    a call with another group size is not served (nothing launched)."""
    config = {"family": "fa2", "block_m": 16, "block_n": 64, "warps": 1, "stages": 2, "kv_splits": 8, "pack_gqa": 1}
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = cli(["attention", "--batch", "4", "--heads", "16", "--kv-heads", "4", "--seq", "1", "--seq-k", "8192",
                  "--head-dim", "128", "--dtype", "bf16", "--causal", "--backend", "cuda", "--arch", "sm_90",
                  "--config", str(tmp_path / "config.json"), "--out", str(tmp_path / "out")], tmp_path)
    assert result.exit_code == 0, result.output
    program = probe(tmp_path / "out", toolchain)
    out, log, asked = run_probe(program, ["2", "16", "5", "4", "5000", "ws"], fake_driver, cc="9.0")
    assert out == ["status=0 ok"], (out, log)
    assert asked["bytes"] == str(8 * (128 + 1) * 4 * 5 * 2 * 16)  # the same workspace as unpacked
    split, combine = launches(log)
    # ceil(4 heads x 5 rows / 16) = 2 query blocks, 2 x 4 K/V heads; the combine over 2 x 16 heads
    assert split["name"] == "attention_fa2_split" and split["grid"] == "2,8,8"
    assert combine["name"] == "attention_fa2_combine" and combine["grid"] == "2,32,1"
    out, log, _ = run_probe(program, ["2", "16", "1", "8", "5000", "ws"], fake_driver, cc="9.0")
    assert out[0].startswith("status=9 ") and not launches(log), (out, log)  # TRACEA_ERROR_UNSUPPORTED_SHAPE
