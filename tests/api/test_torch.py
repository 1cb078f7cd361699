"""torch: Graph.from_fx and patch_conv2d (skipped where torch is not installed; the device machine has it)."""

from __future__ import annotations

import threading

import pytest

import tracea
from tracea_cli.errors import ToolchainMissing

torch = pytest.importorskip("torch", reason="torch is not installed here (the CI machine has none)")
nn = torch.nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.head = nn.Linear(8 * 6 * 6, 10)

    def forward(self, x):
        y = self.relu(self.bn(self.conv(x)) + x)
        return self.head(torch.flatten(y, 1))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = Block().eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-1, 1)
        m.bn.running_var.uniform_(0.5, 1.5)
    return m


def test_from_fx_fuses_the_block_and_matches_torch_on_the_cpu(model, tmp_path):
    x = torch.rand(1, 8, 6, 6) * 2 - 1
    g = tracea.Graph.from_fx(model, (x,))
    plan = tracea.Context(device="cpu", cache=tmp_path, mode="default").optimize_graph(g)
    kernels = [(r.op, r.epilogue) for r in plan.rows if r.source != "graph"]
    assert kernels == [("conv2d", "bias_residual_relu"), ("gemm", "bias")], str(plan)
    out = plan(x=x.permute(0, 2, 3, 1).contiguous())
    with torch.no_grad():
        ref = model(x)
    assert isinstance(out, torch.Tensor) and torch.linalg.norm(out - ref) / torch.linalg.norm(ref) < 1e-5


def test_patch_conv2d_falls_back_for_cpu_tensors_and_says_why(model):
    x = torch.rand(1, 8, 6, 6)
    with torch.no_grad():
        ref = model(x)
    with tracea.patch_conv2d(model) as patch:
        with torch.no_grad():
            out = model(x)
        report = patch.report()
    assert torch.equal(out, ref)
    assert report and not report[0].routed and "not a CUDA device" in report[0].reason and report[0].calls == 1
    assert "forward" not in vars(model.conv)  # unpatched on leaving the block


def test_global_patching_is_idempotent_reversible_and_thread_safe():
    original = nn.Conv2d.forward
    patches = []
    threads = [threading.Thread(target=lambda: patches.append(tracea.patch_conv2d())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(p) for p in patches}) == 1 and nn.Conv2d.forward is not original
    tracea.unpatch_conv2d()
    tracea.unpatch_conv2d()  # nothing patched: nothing happens
    assert nn.Conv2d.forward is original


def test_bad_patch_options_are_one_sentence():
    with pytest.raises(tracea.UsageError, match="cannot route dtype"):
        tracea.patch_conv2d(dtypes=("int8",))
    with pytest.raises(tracea.UsageError, match="torch.nn.Module"):
        tracea.patch_conv2d(model=object())


@pytest.mark.gpu
def test_patch_conv2d_routes_cuda_convolutions_and_autograd_uses_torchs_backward():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    conv = nn.Conv2d(64, 64, 3, padding=1).cuda().half().to(memory_format=torch.channels_last)
    x = torch.rand(2, 64, 14, 14, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    x.requires_grad_(True)
    ref = conv(x)
    with tracea.patch_conv2d(conv, only_faster=False) as patch:
        out = conv(x)
        out.float().sum().backward()
    report = patch.report()
    if not report[0].routed:
        pytest.skip(f"not routed here: {report[0].reason}")
    err = (torch.linalg.norm((out - ref).float()) / torch.linalg.norm(ref.float())).item()
    assert err < 5e-3 and x.grad is not None and out.is_contiguous(memory_format=torch.channels_last)


def _rel(a, b) -> float:
    return (torch.linalg.norm((a - b).float()) / torch.linalg.norm(b.float())).item()


@pytest.mark.gpu
def test_a_declined_layer_shape_goes_straight_to_torch_after_its_first_call():
    """A shape the patch declines (here: under min_flops) is decided once per module and geometry; the calls after
    go to torch's forward without deciding again (an in-place change of the weight's values does not decide again:
    the decision never depends on them, and torch's forward reads them), the report counts them all, and a new
    weight object or another input size decides again."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    conv = nn.Conv2d(16, 16, 3, padding=1).cuda().half().to(memory_format=torch.channels_last)
    x = torch.rand(1, 16, 8, 8, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    with torch.no_grad():
        ref = conv(x)
        with tracea.patch_conv2d(conv, min_flops=10**18) as patch:
            outs = [conv(x) for _ in range(3)]
            fast = patch.router.fast[conv]
            assert fast.launch is None and "min_flops" in fast.outcome
            conv.weight.mul_(1.0)  # new values in the same Parameter: still declined without deciding again
            outs.append(conv(x))
            assert patch.router.fast[conv] is fast
            conv.weight = nn.Parameter(conv.weight.detach().clone())  # a new weight object: decided again
            outs.append(conv(x))
            assert patch.router.fast[conv] is not fast
            bigger = torch.rand(1, 16, 9, 9, device="cuda", dtype=torch.half)
            assert torch.equal(conv(bigger), torch.nn.functional.conv2d(bigger, conv.weight, conv.bias, padding=1))
            report = patch.report()
    assert all(torch.equal(o, ref) for o in outs)
    assert [(r.routed, r.calls) for r in report if "8, 8" in r.shape] == [(False, 5)], report
    assert all("min_flops" in r.reason for r in report)


@pytest.mark.gpu
def test_repeated_inference_calls_take_the_fast_path_and_stay_right_when_anything_changes():
    """After the first routed inference call a layer's calls skip every decision: new inputs each call, a weight
    changed in place, another stream, a misaligned view and a bias swapped for another all still give torch's
    result, and the report counts every call."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    torch.manual_seed(1)
    conv = nn.Conv2d(32, 64, 3, padding=1).cuda().half().to(memory_format=torch.channels_last)
    inputs = [torch.rand(2, 32, 12, 12, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
              for _ in range(4)]
    with torch.no_grad():
        refs = [conv(x) for x in inputs]
        with tracea.patch_conv2d(conv, only_faster=False) as patch:
            outs = [conv(x) for x in inputs]
            report = patch.report()
            if not report or not report[0].routed:
                pytest.skip(f"not routed here: {report[0].reason if report else '?'}")
            assert max(_rel(o, r) for o, r in zip(outs, refs)) < 5e-3
            assert conv in patch.router.fast  # the fast path was set up and used
            conv.weight.mul_(-1.0)  # in place: a new weight version
            assert _rel(conv(inputs[0]), -refs[0] + 2 * conv.bias.view(1, -1, 1, 1)) < 5e-3
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                on_side = conv(inputs[1])
            side.synchronize()
            expected = torch.nn.functional.conv2d(inputs[1], conv.weight, conv.bias, padding=1)
            assert _rel(on_side, expected) < 5e-3
            big = torch.rand(2 * 32 * 12 * 12 + 1, device="cuda", dtype=torch.half)
            odd = big[1:].view(2, 12, 12, 32).permute(0, 3, 1, 2)  # channels_last, 2 bytes off alignment
            assert odd.is_contiguous(memory_format=torch.channels_last)
            expected = torch.nn.functional.conv2d(odd, conv.weight, conv.bias, padding=1)
            assert _rel(conv(odd), expected) < 5e-3
            conv.bias = nn.Parameter(torch.rand_like(conv.bias))
            expected = torch.nn.functional.conv2d(inputs[2], conv.weight, conv.bias, padding=1)
            assert _rel(conv(inputs[2]), expected) < 5e-3
            report = patch.report()
    assert sum(r.calls for r in report) == 4 + 1 + 1 + 1 + 1
    assert any(not r.routed and "multiple of" in r.reason for r in report)  # the misaligned view fell back


@pytest.mark.gpu
def test_only_faster_routes_a_shape_only_where_its_kernel_beat_the_baseline_measured_beside_it(tmp_path):
    """The same layer patched twice on one cache: with only_faster=False it is routed; with the default the report
    either routes it (the kernel measured faster than cuDNN in its tuning run) or names cuDNN's time and the kernel's,
    and the two times are the ones the cache holds."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    from tracea_cli.cache import TuningCache

    conv = nn.Conv2d(16, 32, 3, padding=1).cuda().half().to(memory_format=torch.channels_last)
    x = torch.rand(1, 16, 20, 20, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    ctx = tracea.Context(device="cuda", cache=tmp_path / "cache", mode="default")
    with torch.no_grad():
        with tracea.patch_conv2d(conv, context=ctx, only_faster=False) as patch:
            conv(x)
            (always,) = patch.report()
        with tracea.patch_conv2d(conv, context=ctx) as patch:
            conv(x)
            (faster,) = patch.report()
    if not always.routed:
        pytest.skip(f"not routed here: {always.reason}")
    with TuningCache.open(tmp_path / "cache" / "tuning.sqlite3") as cache:
        (key,) = cache.keys()
        kernel_ms, (name, base) = cache.winner(key).median_ms, cache.baseline(key)
    if kernel_ms < base.median_ms:
        assert faster.routed
    else:
        assert not faster.routed and faster.reason.startswith(f"{name} is faster here")
        assert f"{base.median_ms:.4g} ms" in faster.reason and f"{kernel_ms:.4g} ms" in faster.reason


def test_bad_only_faster_is_one_sentence():
    with pytest.raises(tracea.TraceaError, match="only_faster must be True or False"):
        tracea.patch_conv2d(only_faster="yes")


def test_without_torch_patch_conv2d_says_torch_is_needed(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(ToolchainMissing, match="needs torch"):
        tracea.patch_conv2d()
