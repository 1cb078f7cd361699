"""The shipped datasheet profiles: complete, sourced, and matched by PCI id then by name."""

from __future__ import annotations

import pytest

from tracea_cli.doctor.datasheets import load_datasheets, match_datasheet, normalise_pci_id

REQUIRED = ("NVIDIA H200 SXM", "NVIDIA H100 SXM 80GB", "NVIDIA A100 SXM 80GB", "NVIDIA L4", "NVIDIA GeForce RTX 3070",
            "NVIDIA GeForce RTX 4090", "AMD Instinct MI300X", "AMD Instinct MI250X", "Apple M1", "Apple M2")


def test_every_required_device_has_a_sourced_datasheet():
    sheets = {d.name: d for d in load_datasheets()}
    for name in REQUIRED:
        d = sheets[name]
        figures = [d.memory_bandwidth, d.memory, d.compute_units, *d.peak_flops.values()]
        assert all(f is not None and f.value > 0 for f in figures), name
        assert all(f.source.startswith("https://") for f in figures), name
        assert "fp32" in d.peak_flops, name
        if d.vendor != "apple":
            assert d.pci_ids and {"fp16", "bf16"} <= set(d.peak_flops), name


def test_match_by_pci_id_then_by_name():
    sheets = load_datasheets()
    assert match_datasheet(sheets, pci_id="10de:2335").name == "NVIDIA H200 SXM"
    assert match_datasheet(sheets, pci_id="10DE:2330", name="whatever").name == "NVIDIA H100 SXM 80GB"
    assert match_datasheet(sheets, name="NVIDIA A100-SXM4-80GB").name == "NVIDIA A100 SXM 80GB"
    assert match_datasheet(sheets, name="nvidia  a100 sxm4 80gb").name == "NVIDIA A100 SXM 80GB"
    assert match_datasheet(sheets, name="Apple M2").name == "Apple M2"


@pytest.mark.parametrize("name", ["NVIDIA H200 NVL", "Apple M2 Pro", "NVIDIA A100-SXM4-40GB", "AMD Instinct MI250X / MI250"])
def test_other_products_do_not_match(name):
    assert match_datasheet(load_datasheets(), name=name) is None


def test_pci_id_forms():
    assert normalise_pci_id(0x233510DE) == "10de:2335"  # NVML's packing
    assert normalise_pci_id("0x74a1", vendor=0x1002) == "1002:74a1"
    assert normalise_pci_id("10DE:27B8") == "10de:27b8"


def test_dense_hopper_figures():
    h200 = match_datasheet(load_datasheets(), pci_id="10de:2335")
    assert h200.memory_bandwidth.value == 4.8e12 and h200.peak_flops["bf16"].value == 989.5e12
    assert "sparsity" in h200.peak_flops["bf16"].note
    assert h200.figure("gemm_flops", "fp32").value == 67e12 and h200.figure("launch_latency") is None
