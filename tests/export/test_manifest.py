"""The manifest: built from variants, valid against its schema; the validator catches what it should."""

from __future__ import annotations

import copy
import json

import pytest

from tracea_cli.export.manifest import (
    COMPILED_ONLY,
    SCHEMA_VERSION,
    VERIFIED,
    Kernel,
    Manifest,
    Measurement,
    PtxImage,
    Variant,
    Verification,
    schema,
    validate,
)
from tracea_cli.ops.gemm.export.abi import INTS, POINTERS
from tracea_cli.ops.gemm.problem import EPILOGUE_NAMES, LAYOUTS
from tracea_cli.ops.launch import KernelStep, LaunchPlan, MemsetStep
from tracea_cli.ops.registry import get_op

SHAPES = ({"m": 512, "n": 512, "k": 512}, {"m": 2048, "n": 1024, "k": 4096})
VALID_FOR = {f"{d}_{b}": v for d in "mnk" for b, v in (("min", 1), ("max", 2**31 - 1), ("multiple", 8))}


def variant(shape, arch, *, verified: bool, split_k: int = 1) -> Variant:
    main = KernelStep("gemm_main", grid=("tiles", 1, "split_k"), block=(256, 1, 1), dynamic_smem_bytes=81408)
    steps: list = [main]
    kernels = [Kernel("gemm_main", {"x": "tiles", "y": 1, "z": "split_k"}, (256, 1, 1), 81408, 0, 230, 0)]
    if split_k > 1:
        steps.insert(0, MemsetStep(elem_bytes=4))
        steps.append(KernelStep("gemm_splitk_reduce", grid=("mn/256", 1, 1), block=(256, 1, 1)))
        kernels.append(Kernel("gemm_splitk_reduce", {"x": "mn/256", "y": 1, "z": 1}, (256, 1, 1), 0, 0, 30, 0))
    check = (Verification(VERIFIED, device="NVIDIA H200 | sm_90", rel_error=2e-4, bound=5e-3, date="2026-11-29T00:00:00Z",
                          evidence="tuning cache key abc") if verified else Verification(COMPILED_ONLY, evidence="file"))
    label = f"{shape['m']}x{shape['n']}x{shape['k']}_{arch}"
    plan = LaunchPlan(steps=tuple(steps), params=("A", "B", "C", "bias", "residual", "workspace", "M", "N", "K", "lda",
                                                  "ldb", "ldc"),
                      tile_m=128, tile_n=256, split_k=split_k, workspace_bytes_per_mn=4 if split_k > 1 else 0,
                      alignment_bytes=16)
    return Variant(shape=shape, arch=arch, config={"block_m": 128, "split_k": split_k}, origin="cache", origin_detail="x",
                   file=f"kernels/{label}.cubin", source_file=f"kernels/{label}.cu", launch=plan,
                   kernels=tuple(kernels), alignment_bytes=16, valid_for=VALID_FOR, verification=check,
                   measurement=Measurement("NVIDIA H200 | sm_90", 0.05, 0.01, 20, "2026-11-29T00:00:00Z") if verified else None)


def manifest() -> Manifest:
    variants = (variant(SHAPES[0], "sm_80", verified=False), variant(SHAPES[0], "sm_90", verified=True),
                variant(SHAPES[1], "sm_80", verified=False, split_k=2), variant(SHAPES[1], "sm_90", verified=True))
    return Manifest(op="gemm", dtype="fp16", fields={"layout": "nn", "epilogue": "none"}, prefix="tracea_gemm_fp16_nn",
                    variants=variants,
                    ptx=tuple(PtxImage(s, "compute_80", f"kernels/{i}.ptx", "sm_80") for i, s in enumerate(SHAPES)),
                    ptx_note="PTX of sm_80", toolchain={"nvrtc": "13.0", "ptx_isa": "9.0", "tracea": "0.1.0"},
                    min_driver="13.0", files={"c_header": "a.h", "op_header": "tracea_gemm.h",
                                              "runtime_header": "tracea_runtime.h",
                                              "cpp_header": "tracea.hpp", "example": "example.cpp", "cmake": "CMakeLists.txt"},
                    created="2026-11-29T00:00:00Z", tracea_version="0.1.0", shapes=SHAPES)


def test_a_manifest_built_from_variants_is_valid_and_survives_json():
    doc = manifest().as_dict()
    assert validate(doc) == []
    assert validate(json.loads(json.dumps(doc))) == []
    assert doc["shape"] == list(SHAPES) and doc["schema_version"] == SCHEMA_VERSION == 2
    assert (doc["op"], doc["dtype"], doc["layout"], doc["epilogue"]) == ("gemm", "fp16", "nn", "none")
    assert manifest().label == "gemm fp16 nn"  # the fields that are set: an epilogue of "none" is left out
    assert Manifest(**{**manifest().__dict__, "fields": {"layout": "nt", "epilogue": "bias_relu"}}).label == \
        "gemm fp16 nt bias_relu"
    split = next(e for e in doc["launch"] if e["shape"] == SHAPES[1] and e["arch"] == "sm_80")["description"]
    assert [s["kind"] for s in split["steps"]] == ["memset", "kernel", "kernel"]  # the plan, as LaunchPlan.as_dict
    assert split["steps"][0] == {"kind": "memset", "buffer": "workspace", "bytes_per": "mn", "elem_bytes": 4}
    assert split["workspace_bytes_per_mn"] == 4 and split["tile_m"] == 128 and split["split_k"] == 2
    assert {(k["name"], k["arch"]) for k in doc["kernels"]} >= {("gemm_main", "sm_80"), ("gemm_splitk_reduce", "sm_80")}
    assert doc["requires"] == {"min_driver": "13.0", "min_driver_version": 13000, "archs": ["sm_80", "sm_90"],
                               "shared_bytes": {"sm_80": 81408, "sm_90": 81408},
                               "threads_per_block": {"sm_80": 256, "sm_90": 256}}
    assert [m["arch"] for m in doc["measurement"]] == ["sm_90", "sm_90"]
    statuses = {(v["shape"]["m"], v["arch"]): v["status"] for v in doc["verification"]}
    assert statuses == {(512, "sm_80"): COMPILED_ONLY, (512, "sm_90"): VERIFIED, (2048, "sm_80"): COMPILED_ONLY,
                        (2048, "sm_90"): VERIFIED}


def test_measurement_is_null_when_nothing_was_measured():
    m = manifest()
    unmeasured = Manifest(**{**m.__dict__, "variants": tuple(v for v in m.variants if v.arch == "sm_80")})
    doc = unmeasured.as_dict()
    assert doc["measurement"] is None and validate(doc) == []


def broken(change) -> list[str]:
    doc = copy.deepcopy(manifest().as_dict())
    change(doc)
    return validate(doc)


@pytest.mark.parametrize("change, expected", [
    (lambda d: d.pop("toolchain"), "missing 'toolchain'"),
    (lambda d: d.update(dtype="fp8"), "'fp8' is not one of"),
    (lambda d: d["shape"][0].update(m=0), "below the minimum 1"),
    (lambda d: d["kernels"][0].update(arch="ampere"), "does not match"),
    (lambda d: d["kernels"][0].update(block=[256, 1]), "at least 3"),
    (lambda d: d["kernels"][0]["grid"].update(x="rows"), "none of the allowed forms"),
    (lambda d: d["verification"][1].update(rel_error=None), "none of the allowed forms"),
    (lambda d: d["verification"][0].update(status="probably fine"), "none of the allowed forms"),
    (lambda d: d.update(extra=1), "unexpected key 'extra'"),
    (lambda d: d["launch"].pop(), "covers"),
    (lambda d: d["launch"][0]["description"]["steps"][0].update(name="gemm_other"), "which $.kernels does not list"),
    (lambda d: d["measurement"][0].update(arch="sm_86"), "is not an exported variant"),
    (lambda d: d["shape"].pop(), "but the variants cover"),
    # the schema is the op's: its sizes, its other options, its ABI's slots
    (lambda d: d.update(layout="tn"), "'tn' is not one of"),
    (lambda d: d.update(epilogue="bias_tanh"), "'bias_tanh' is not one of"),
    (lambda d: d.pop("epilogue"), "missing 'epilogue'"),
    (lambda d: d["shape"][0].update(q=4), "unexpected key 'q'"),
    (lambda d: d["config"][0]["shape"].pop("k"), "missing 'k'"),
    (lambda d: d["launch"][0]["valid_for"].pop("k_multiple"), "missing 'k_multiple'"),
    (lambda d: d.update(schema_version=1), "must be 2"),
    (lambda d: d["files"].pop("op_header"), "missing 'op_header'"),
    (lambda d: d["launch"][0]["description"].update(scratch=[{
        "name": "Q_staged", "source": "A", "transposed": False, "rows": "M", "cols": "K", "ld": "lda_staged",
        "ld_multiple": 64, "elem_bytes": 2, "align_bytes": 256}]), "'Q_staged' is not one of"),
    (lambda d: d["launch"][0]["description"].update(scratch=[{
        "name": "A_staged", "source": "A", "transposed": False, "rows": "rows", "cols": "K", "ld": "lda_staged",
        "ld_multiple": 64, "elem_bytes": 2, "align_bytes": 256}]), "'rows' is not one of"),
    (lambda d: d.update(op="conv"), "unknown operation 'conv'"),
])
def test_the_validator_catches(change, expected):
    errors = broken(change)
    assert errors and any(expected in e for e in errors), errors


def test_the_validator_refuses_schema_keywords_it_does_not_implement():
    with pytest.raises(ValueError, match="does not implement"):
        validate({"a": 1}, {"type": "object", "patternProperties": {}})
    assert "$schema" in schema(get_op("gemm")) and validate(3, {"type": "integer", "minimum": 1}) == []
    assert validate(0, {"type": "integer", "minimum": 1}) == ["$: 0 is below the minimum 1"]


def test_the_schema_is_made_from_the_ops_declaration():
    op = get_op("gemm")
    s = schema(op)
    props = s["properties"]
    assert props["op"] == {"const": "gemm"} and props["schema_version"] == {"const": SCHEMA_VERSION}
    assert props["dtype"]["enum"] == list(next(o for o in op.options if o.name == "dtype").choices)
    assert props["layout"]["enum"] == list(LAYOUTS) and props["epilogue"]["enum"] == list(EPILOGUE_NAMES)
    assert {"layout", "epilogue"} <= set(s["required"])
    shape = props["shape"]["items"]
    assert shape["required"] == ["m", "n", "k"] and set(shape["properties"]) == {"m", "n", "k"}
    assert props["launch"]["items"]["properties"]["valid_for"]["required"] == [
        f"{d}_{b}" for d in "mnk" for b in ("min", "max", "multiple")]
    description = props["launch"]["items"]["properties"]["description"]["properties"]
    scratch = description["scratch"]["items"]["properties"]
    assert scratch["name"]["enum"] == list(POINTERS) == list(op.export.pointers)
    assert scratch["source"]["enum"] == [*POINTERS, None]  # None: an intermediate, no operand staged
    assert scratch["rows"]["enum"] == scratch["ld"]["enum"] == list(INTS) == list(op.export.ints)
    for form in description["tensor_maps"]["additionalProperties"]["anyOf"]:  # tiled, tiled3d, im2col
        assert form["properties"]["tensor"]["enum"] == list(POINTERS)
