"""BoundLaunch.pointer_writer (the Python API's per-call fast path) on plans with TMA tensor maps, on the CPU: the
packed pointer slots and the map buffers get the new addresses; a map is encoded once per address, then copied."""

from __future__ import annotations

import ctypes

from tracea_cli.backends import cuda
from tracea_cli.ops.launch import KernelStep, LaunchPlan, TensorMap


def _spec(tensor: str) -> TensorMap:
    return TensorMap(tensor, ("K", "M"), "lda", (64, 128), "fp16", 2)


def _bound(monkeypatch):
    calls: list[tuple[str, int]] = []

    def fake_encode(ptr, spec, sizes):  # stands in for the driver's cuTensorMapEncodeTiled (no GPU here)
        calls.append((spec.tensor, ptr))
        return (spec.tensor.encode() + ptr.to_bytes(8, "little")).ljust(128, b"\0")

    monkeypatch.setattr(cuda, "encode_tensor_map", fake_encode)
    plan = LaunchPlan(steps=(KernelStep("main", (1, 1, 1), (128, 1, 1)),), params=("tmap_a", "C", "M"),
                      tensor_maps={"tmap_a": _spec("A"), "tmap_b": _spec("B")})
    pointers = {"C": [ctypes.c_void_p(0)], "A": [ctypes.c_void_p(0)]}
    maps = {"tmap_a": [ctypes.create_string_buffer(128), ctypes.create_string_buffer(128)],
            "tmap_b": [ctypes.create_string_buffer(128)]}
    return cuda.BoundLaunch([], [], pointers, maps, plan, {"M": 256, "K": 64, "lda": 64}), pointers, maps, calls


def test_a_tensor_read_through_a_map_is_moved_with_its_map(monkeypatch):
    bound, pointers, maps, calls = _bound(monkeypatch)
    write = bound.pointer_writer(("A", "C"))
    write((0x1000, 0x2000))
    assert pointers["C"][0].value == 0x2000 and pointers["A"][0].value == 0x1000
    for buffer in maps["tmap_a"]:
        assert buffer.raw[:9] == b"A" + (0x1000).to_bytes(8, "little")
    assert maps["tmap_b"][0].raw == b"\0" * 128  # B did not move: its map is untouched
    assert calls == [("A", 0x1000)]


def test_a_repeated_address_is_copied_not_encoded_again(monkeypatch):
    bound, _, maps, calls = _bound(monkeypatch)
    write = bound.pointer_writer(("A", "C"))
    for address in (0x1000, 0x3000, 0x1000, 0x3000, 0x1000):
        write((address, 0x2000))
        assert maps["tmap_a"][0].raw[1:9] == address.to_bytes(8, "little")
    assert calls == [("A", 0x1000), ("A", 0x3000)]


def test_the_kept_encodings_are_bounded(monkeypatch):
    bound, _, maps, calls = _bound(monkeypatch)
    write = bound.pointer_writer(("A",))
    for i in range(cuda.ENCODED_MAPS_KEPT + 5):
        write((0x10000 + 256 * i,))
    write((0x10000,))  # forgotten when the memo started afresh: encoded again, and still right
    assert len(calls) == cuda.ENCODED_MAPS_KEPT + 6
    assert maps["tmap_a"][1].raw[1:9] == (0x10000).to_bytes(8, "little")
