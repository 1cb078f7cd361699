"""`tracea doctor --ray-address`: the Ray cluster it sees (live nodes, CPUs, GPUs, GPU kinds), on a fake Ray and on a
real local one where Ray is installed; and the three refusals (Ray missing, an address that does not answer, no
GPUs), each one sentence with exit code 2 and no traceback."""

from __future__ import annotations

import importlib.util
import json
import sys
import time

import pytest
from typer.testing import CliRunner

from tracea_cli.cli import app
from tracea_cli.doctor.cluster import RayCluster, RayNode, inspect_cluster, nodes_of
from tracea_cli.errors import UsageError

runner = CliRunner()
HAS_RAY = importlib.util.find_spec("ray") is not None


class FakeRay:
    """What the doctor asks of Ray: is_initialized, init, nodes, shutdown, __version__."""

    __version__ = "9.9.9"

    def __init__(self, nodes):
        self._nodes, self.initialized, self.inits = nodes, False, []

    def is_initialized(self):
        return self.initialized

    def init(self, **kwargs):
        self.inits.append(kwargs)
        self.initialized = True

    def nodes(self):
        return self._nodes

    def shutdown(self):
        self.initialized = False


def _node(ip, gpus, kind=None, alive=True):
    res = {"CPU": 8.0, "GPU": gpus} if gpus else {"CPU": 8.0}
    if kind:
        res[f"accelerator_type:{kind}"] = 1.0
    return {"Alive": alive, "NodeManagerAddress": ip, "Resources": res}


TWO_KINDS = [_node("10.0.0.2", 8, "H200"), _node("10.0.0.1", 4, "A100"), _node("10.0.0.3", 8, "H200", alive=False)]


def test_live_nodes_gpus_and_kinds_are_read_from_ray():
    nodes = nodes_of(TWO_KINDS)
    assert nodes == (RayNode("10.0.0.1", 8.0, 4.0, ("A100",)), RayNode("10.0.0.2", 8.0, 8.0, ("H200",)))
    cluster = RayCluster("auto", "9.9.9", nodes)
    assert cluster.gpus == 12 and cluster.device_classes == ("A100", "H200")
    assert cluster.as_dict()["nodes"][1] == {"address": "10.0.0.2", "cpus": 8.0, "gpus": 8.0, "gpu_kinds": ["H200"]}


def test_the_doctor_connects_describes_and_leaves_ray_as_it_found_it():
    fake = FakeRay(TWO_KINDS)
    cluster = inspect_cluster("auto", ray=fake)
    assert fake.inits[0]["address"] == "auto" and not fake.initialized
    assert len(cluster.nodes) == 2 and cluster.ray_version == "9.9.9"


def test_a_cluster_without_gpus_is_refused_in_one_sentence():
    with pytest.raises(UsageError, match=r"the Ray cluster at auto has no GPUs \(1 node\(s\), CPUs only\)"):
        inspect_cluster("auto", ray=FakeRay([_node("10.0.0.1", 0)]))


def _doctor(*args):
    return runner.invoke(app, ["doctor", *args])


def test_cli_prints_the_cluster_table_and_json(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", FakeRay(TWO_KINDS))
    r = _doctor("--ray-address", "auto", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)["ray_cluster"]
    assert d["gpus"] == 12 and d["device_classes"] == ["A100", "H200"] and len(d["nodes"]) == 2
    monkeypatch.setitem(sys.modules, "ray", FakeRay(TWO_KINDS))
    r = _doctor("--ray-address", "auto")
    assert r.exit_code == 0, r.stderr
    assert "10.0.0.2" in r.stdout and "2 GPU kinds (A100, H200)" in r.stdout


@pytest.mark.parametrize("case", ["not installed", "unreachable", "no gpus"])
def test_cli_bad_input_is_one_sentence_and_exit_2(monkeypatch, case):
    address = "auto"
    if case == "not installed":
        monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    elif case == "unreachable":
        monkeypatch.setitem(sys.modules, "ray", FakeRay(TWO_KINDS))
        address = "127.0.0.1:1"
    else:
        monkeypatch.setitem(sys.modules, "ray", FakeRay([_node("10.0.0.1", 0)]))
    began = time.monotonic()
    r = _doctor("--ray-address", address)
    assert r.exit_code == 2 and "Traceback" not in r.stdout + r.stderr
    assert time.monotonic() - began < 10
    expected = {"not installed": 'pip install "tracea[ray]"', "no gpus": "has no GPUs",
                "unreachable": "cannot reach the Ray cluster at 127.0.0.1:1"}[case]
    assert expected in " ".join(r.stderr.split())


@pytest.mark.timeout(180)
@pytest.mark.skipif(not HAS_RAY, reason='Ray is not installed (pip install "tracea[ray]")')
def test_a_real_local_ray_with_logical_gpus_is_seen():
    import ray

    try:
        ray.init(num_cpus=1, num_gpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as e:  # pragma: no cover - depends on the machine
        pytest.skip(f"a local Ray did not start here: {type(e).__name__}: {e}")
    try:
        cluster = inspect_cluster("auto")  # already connected: describes the running one, leaves it running
        assert ray.is_initialized()
    finally:
        ray.shutdown()
    assert len(cluster.nodes) == 1 and cluster.gpus == 2 and cluster.nodes[0].cpus == 1
