"""The Ray cluster the doctor can see (`tracea doctor --ray-address auto|HOST:PORT`): its live nodes, their CPUs and
GPUs, and the kinds of GPU Ray names (its `accelerator_type:*` resources). Computing only; doctor/render.py prints.

Ray is imported here only when asked for. Bad input is one sentence with the fix (UsageError, exit 2): Ray not
installed, an address that does not answer (a HOST:PORT is tried with a plain socket first, because Ray itself waits
a minute for it), a cluster without GPUs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tracea_cli.errors import UsageError

START_HINT = "Start one (`ray start --head`) or give --ray-address HOST:PORT of its head."


@dataclass(frozen=True)
class RayNode:
    address: str  # the node's IP as Ray reports it
    cpus: float
    gpus: float
    gpu_kinds: tuple[str, ...]  # Ray's accelerator types on this node ("H200", ...); empty when Ray names none


@dataclass(frozen=True)
class RayCluster:
    address: str  # what was asked for: "auto" or HOST:PORT
    ray_version: str
    nodes: tuple[RayNode, ...]  # live nodes only

    @property
    def gpus(self) -> float:
        return sum(n.gpus for n in self.nodes)

    @property
    def device_classes(self) -> tuple[str, ...]:
        """The GPU kinds across the cluster; more than one means one search per kind (docs/distributed.md)."""
        return tuple(sorted({k for n in self.nodes for k in n.gpu_kinds}))

    def as_dict(self) -> dict[str, Any]:
        nodes = [{**asdict(n), "gpu_kinds": list(n.gpu_kinds)} for n in self.nodes]
        return {"address": self.address, "ray_version": self.ray_version, "gpus": self.gpus,
                "device_classes": list(self.device_classes), "nodes": nodes}


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("Ray is not installed, so there is no Ray cluster to see.",
                         'Install it: pip install "tracea[ray]".') from None
    return ray


def check_reachable(address: str | None) -> None:
    """A HOST:PORT that does not answer is refused at once; "auto" (and None) Ray resolves itself."""
    if not address or address == "auto" or ":" not in address.removeprefix("ray://"):
        return
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=3.0):
            return
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot reach the Ray cluster at {address}: {getattr(e, 'strerror', None) or e}.",
                         START_HINT) from None


def nodes_of(raw_nodes: list[dict[str, Any]]) -> tuple[RayNode, ...]:
    """Live nodes from `ray.nodes()` records (their `Alive`, `NodeManagerAddress` and `Resources`)."""
    out = []
    for n in raw_nodes:
        if not n.get("Alive", False):
            continue
        res = n.get("Resources", {}) or {}
        kinds = tuple(sorted(k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")))
        out.append(RayNode(address=str(n.get("NodeManagerAddress", "?")), cpus=float(res.get("CPU", 0)),
                           gpus=float(res.get("GPU", 0)), gpu_kinds=kinds))
    return tuple(sorted(out, key=lambda node: node.address))


def inspect_cluster(address: str, *, ray: Any = None) -> RayCluster:
    """Connect to the Ray cluster at `address` ("auto" or HOST:PORT) and describe it; refuses one without GPUs."""
    if not address:
        raise UsageError("--ray-address is empty.", "Give --ray-address auto or HOST:PORT of the cluster's head.")
    ray = ray or import_ray()
    connected_here = False
    if not ray.is_initialized():
        check_reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, include_dashboard=False, ignore_reinit_error=True)
            connected_here = True
        except Exception as e:  # ConnectionError, no running cluster for "auto", a bad address
            text = " ".join(str(e).split())[:200]
            raise UsageError(f"cannot reach the Ray cluster at {address}: {text}", START_HINT) from None
    try:
        cluster = RayCluster(address=address, ray_version=str(getattr(ray, "__version__", "?")),
                             nodes=nodes_of(ray.nodes()))
    finally:
        if connected_here:
            ray.shutdown()
    if cluster.gpus < 1:
        raise UsageError(f"the Ray cluster at {address} has no GPUs ({len(cluster.nodes)} node(s), CPUs only).",
                         "Start Ray on GPU nodes with their GPUs (`ray start --num-gpus N`).")
    return cluster
