"""A real multi-node Ray cluster on one Linux machine, for tests and benchmarks of the ``ray`` execution strategy.

The head node runs in the root network namespace, bound to a non-loopback address (the gateway of a
:mod:`rollouthub.testing.netns` namespace); each worker node runs in its own network namespace with its own
address, joined with ``ray start --address <head>``; the nodes reach each other's addresses (the root namespace
forwards between the namespaces while the cluster runs), as the machines of a real cluster do. Every node is a
``ray start --block`` child process in its own session, so one node can be killed (every process of it, not
``ray stop``, which would stop every Ray process on the machine) and the whole cluster is torn down on exit, also
when the body fails::

    reason = ray_cluster_unavailable_reason()          # None where Ray and network namespaces are available
    with ray_cluster(n_worker_nodes=2) as cluster:
        ray.init(address=cluster.address)
        ...
        cluster.kill_node(1)                           # SIGKILL every process of the first worker node

Each cluster has a short private temp dir (``/tmp/rh-xxxxxx``: Ray's socket paths have a length limit), free ports
for its GCS, node managers and object managers, its own worker-port ranges, no dashboard, and token
authentication explicitly disabled (``RAY_AUTH_MODE=disabled``: Ray 2.5x+ may otherwise turn token authentication
on depending on a token file in the home directory) -- so several runs can share the machine.

Without namespaces (``use_namespaces=False``) every node runs in the root namespace on ``127.0.0.1``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Dict, Iterator, List, Optional, Sequence

import psutil

from rollouthub.testing.netns import Host, namespaces_unavailable_reason, network_namespaces

__all__ = ["RayCluster", "RayNode", "ray_cluster", "ray_cluster_unavailable_reason", "ray_cli"]

#: Environment of every node (and of the readiness probe): explicit settings instead of Ray's defaults that depend on
#: files in the home directory or on the network. A lost node is declared dead after ~5 s of failed health checks
#: (Ray's default is ~30 s), so that a node-loss test does not wait long for its actors to be restarted elsewhere.
NODE_ENV: Dict[str, str] = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "5",
}
_OBJECT_STORE_BYTES = 128 * 1024 * 1024  # runners exchange nothing through Ray's object store

# Runs in a subprocess (so that the caller's process is not connected to Ray by the fixture): waits until the
# expected number of nodes are alive, then prints them as one JSON line.
_WAIT_FOR_NODES = """
import json, sys, time
import ray
address, count, deadline = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
ray.init(address=address, logging_level="ERROR", log_to_driver=False)
while True:
    alive = [n for n in ray.nodes() if n["Alive"]]
    if len(alive) >= count or time.monotonic() > deadline:
        break
    time.sleep(0.2)
print(json.dumps([{"id": n["NodeID"], "ip": n["NodeManagerAddress"], "port": n["NodeManagerPort"]} for n in alive]))
ray.shutdown()
"""


@dataclass(frozen=True)
class RayNode:
    """One node of a :class:`RayCluster`: ``name`` (``head``, ``worker-1``, ...), its ``ip``, the network namespace
    it runs in (``host``; ``None`` for the head and without namespaces), Ray's ``node_id`` (hex) and its
    ``temp_dir`` (logs under ``session_latest/logs``)."""

    name: str
    ip: str
    host: Optional[Host]
    node_id: str
    temp_dir: str


@dataclass
class _NodeProcess:
    name: str
    ip: str
    host: Optional[Host]
    temp_dir: Path
    node_manager_port: int
    proc: subprocess.Popen[bytes]
    log: IO[bytes]

    def log_tail(self, chars: int = 3000) -> str:
        return (self.temp_dir.parent / f"{self.name}.log").read_text(errors="replace")[-chars:]


def ray_cli() -> List[str]:
    """The ``ray`` command of the running interpreter's environment (never one found elsewhere on ``PATH``)."""
    beside = Path(sys.executable).parent / "ray"
    if beside.exists():
        return [str(beside)]
    return [sys.executable, "-m", "ray.scripts.scripts"]


def ray_cluster_unavailable_reason(use_namespaces: bool = True) -> Optional[str]:
    """Why :func:`ray_cluster` cannot run here (``None`` when it can): Ray is not installed in this interpreter's
    environment, or (with ``use_namespaces``) network namespaces cannot be created."""
    if importlib.util.find_spec("ray") is None:
        return "ray is not installed in this environment (pip install 'rollouthub[ray]')"
    if use_namespaces:
        return namespaces_unavailable_reason()
    return None


def _port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _ephemeral_ports() -> range:
    """The ports the kernel hands out for ``bind(port=0)`` (where the single ports of the nodes come from)."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def _free_port_range(host: str, size: int, taken: List[range]) -> range:
    """``size`` consecutive ports, all free now, below the kernel's ephemeral range (so that no single port picked
    by :func:`_free_port` falls inside) and apart from the ranges ``taken``, at a random place (so that concurrent
    clusters rarely pick the same)."""
    ceiling = min(_ephemeral_ports().start, 65536)
    if ceiling - size <= 10002:
        ceiling = 65536  # no room below the ephemeral range: take the small risk of a collision
    for _ in range(200):
        start = random.randrange(10002, ceiling - size)
        ports = range(start, start + size)
        if any(start < other.stop and other.start < ports.stop for other in taken):
            continue
        if all(_port_is_free(host, port) for port in ports):
            taken.append(ports)
            return ports
    raise RuntimeError(f"no {size} consecutive free ports on {host} for Ray's workers")


def _session_members(session_id: int) -> List[int]:
    members = []
    for pid in psutil.pids():
        try:
            if os.getsid(pid) == session_id:
                members.append(pid)
        except OSError:  # gone meanwhile
            continue
    return members


def _namespace_members(host: Host) -> List[int]:
    result = subprocess.run(["ip", "netns", "pids", host.name], capture_output=True, text=True, timeout=30)
    return [int(pid) for pid in result.stdout.split()]


def _node_pids(node: _NodeProcess) -> List[int]:
    """Every live process of ``node``: its session, its descendants, and (in a namespace) every process there."""
    pids = set(_session_members(node.proc.pid))
    try:
        pids.update(child.pid for child in psutil.Process(node.proc.pid).children(recursive=True))
    except psutil.NoSuchProcess:
        pass
    if node.host is not None:
        pids.update(_namespace_members(node.host))
    if node.proc.poll() is None:
        pids.add(node.proc.pid)
    return sorted(pids)


def _signal_all(pids: Sequence[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _wait_gone(pids: Sequence[int], timeout: float) -> List[int]:
    """Wait until ``pids`` have exited (children of ours are reaped); return those still alive."""
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return [p.pid for p in alive]


def _kill_node(node: _NodeProcess, graceful_timeout: float) -> None:
    """Stop every process of ``node``: SIGTERM first when ``graceful_timeout`` > 0 (``ray start --block`` then stops
    its raylet and workers), then SIGKILL whatever is left, until nothing is left (a raylet may start a worker while
    being killed)."""
    if graceful_timeout > 0 and node.proc.poll() is None:
        node.proc.send_signal(signal.SIGTERM)
        try:
            node.proc.wait(graceful_timeout)
        except subprocess.TimeoutExpired:
            pass
    for _ in range(20):
        pids = _node_pids(node)
        if not pids:
            break
        _signal_all(pids, signal.SIGKILL)
        _wait_gone(pids, timeout=10)
    else:
        raise RuntimeError(f"Ray node {node.name} keeps starting processes after being killed: {_node_pids(node)}")
    node.proc.wait(10)


class RayCluster:
    """A running cluster made by :func:`ray_cluster`: ``address`` (``ip:port`` of the head's GCS, for
    ``ray.init(address=...)`` or the strategy's ``address``), ``nodes`` (head first), ``env`` (the Ray settings of
    its nodes, see :data:`NODE_ENV`), and :meth:`kill_node`."""

    def __init__(self, address: str, nodes: List[RayNode], processes: List[_NodeProcess], temp_dir: str) -> None:
        self.address = address
        self.nodes = nodes
        self.temp_dir = temp_dir
        self.env = dict(NODE_ENV)
        self._processes = processes

    @property
    def head_ip(self) -> str:
        """The head node's address (a non-loopback root-namespace address when namespaces are used)."""
        return self.nodes[0].ip

    def kill_node(self, index: int) -> None:
        """SIGKILL every process of node ``index`` (0 is the head) -- a lost host, not a clean shutdown: its
        raylet, object store and workers (the actors on it) die at once, and Ray's GCS notices by failed health
        checks. Returns when they have all exited."""
        if not 0 <= index < len(self._processes):
            raise IndexError(f"no node {index}: the cluster has nodes 0..{len(self._processes) - 1}")
        _kill_node(self._processes[index], graceful_timeout=0)

    def node_pids(self, index: int) -> List[int]:
        """The process ids of every live process of node ``index`` (its ``ray start``, raylet, agents, workers...)."""
        return _node_pids(self._processes[index])

    def node_running(self, index: int) -> bool:
        """Whether the ``ray start`` process of node ``index`` is still running (it is not after :meth:`kill_node`)."""
        return self._processes[index].proc.poll() is None

    def log_tails(self, chars: int = 2000) -> Dict[str, str]:
        """The end of each node's ``ray start`` output, by node name (for assertion messages)."""
        return {p.name: p.log_tail(chars) for p in self._processes}


def _start_node(
    name: str,
    ip: str,
    host: Optional[Host],
    root: Path,
    cpus: int,
    worker_ports: range,
    env: Dict[str, str],
    *,
    gcs_port: Optional[int] = None,
    join: Optional[str] = None,
) -> _NodeProcess:
    """Start one node: the head (with ``gcs_port``) or a worker node joining the GCS at ``join``."""
    temp_dir = root / name
    bind = ip if host is None else "0.0.0.0"  # ports of a namespace node are free in its fresh namespace
    node_manager_port = _free_port(bind)
    argv = [*ray_cli(), "start", "--block", "--disable-usage-stats"]
    argv += ["--node-ip-address", ip, "--temp-dir", str(temp_dir), "--num-cpus", str(cpus)]
    argv += ["--object-store-memory", str(_OBJECT_STORE_BYTES)]
    argv += ["--node-manager-port", str(node_manager_port), "--object-manager-port", str(_free_port(bind))]
    argv += ["--min-worker-port", str(worker_ports.start), "--max-worker-port", str(worker_ports.stop - 1)]
    argv += ["--dashboard-agent-listen-port", str(_free_port(bind))]
    argv += ["--dashboard-agent-grpc-port", str(_free_port(bind))]
    argv += ["--metrics-export-port", str(_free_port(bind)), "--runtime-env-agent-port", str(_free_port(bind))]
    if gcs_port is not None:
        argv += ["--head", "--include-dashboard=false", "--port", str(gcs_port)]
        argv += ["--ray-client-server-port", str(_free_port(ip))]
    elif join is not None:
        argv += ["--address", join]
    else:
        raise ValueError("a node is either the head (gcs_port) or joins one (join)")
    log = (root / f"{name}.log").open("wb")
    command = argv if host is None else host.command(argv)
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return _NodeProcess(name, ip, host, temp_dir, node_manager_port, proc, log)


def _wait_for_nodes(address: str, processes: List[_NodeProcess], env: Dict[str, str], timeout: float) -> List[dict]:
    """Wait until every node of ``processes`` is alive in the cluster (or one of them exited, or ``timeout``)."""
    probe = subprocess.Popen(
        [sys.executable, "-c", _WAIT_FOR_NODES, address, str(len(processes)), str(timeout)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        deadline = time.monotonic() + timeout + 60
        while True:
            try:
                out, err = probe.communicate(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            exited = [p for p in processes if p.proc.poll() is not None]
            if exited or time.monotonic() > deadline:
                reason = f"node {exited[0].name} exited" if exited else "the readiness probe hung"
                logs = "\n".join(f"--- {p.name}\n{p.log_tail()}" for p in processes)
                raise RuntimeError(f"Ray cluster did not start: {reason}\n{logs}")
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.wait()
    if probe.returncode != 0:
        raise RuntimeError(f"Ray cluster readiness probe failed: {err.decode(errors='replace')[-3000:]}")
    alive: List[dict] = json.loads(out.decode().strip().splitlines()[-1])
    if len(alive) < len(processes):
        logs = "\n".join(f"--- {p.name}\n{p.log_tail()}" for p in processes)
        raise RuntimeError(f"only {len(alive)} of {len(processes)} Ray nodes came up in {timeout:.0f}s\n{logs}")
    return alive


@contextmanager
def ray_cluster(
    n_worker_nodes: int = 2,
    cpus_per_node: int = 2,
    use_namespaces: bool = True,
    worker_ports_per_node: int = 200,
    start_timeout: float = 120.0,
) -> Iterator[RayCluster]:
    """Start a head and ``n_worker_nodes`` worker nodes (each in its own network namespace with ``use_namespaces``)
    with ``cpus_per_node`` CPUs each; yield the :class:`RayCluster` once every node is alive; stop every process
    of it and remove its temp dir on exit."""
    if n_worker_nodes < 0:
        raise ValueError(f"n_worker_nodes must be >= 0, got {n_worker_nodes}")
    reason = ray_cluster_unavailable_reason(use_namespaces)
    if reason is not None:
        raise RuntimeError(f"cannot start a Ray cluster: {reason}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_AUTH_"))}
    env.update(NODE_ENV)
    root = Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp"))  # short: Ray's socket paths have a length limit
    processes: List[_NodeProcess] = []
    with ExitStack() as stack:
        try:
            hosts: List[Optional[Host]] = [None] * n_worker_nodes
            head_ip = "127.0.0.1"
            if use_namespaces:
                namespaces = stack.enter_context(network_namespaces(max(n_worker_nodes, 1), route_between=True))
                head_ip = namespaces[0].gateway
                hosts = list(namespaces[:n_worker_nodes])
            taken: List[range] = []  # worker-port ranges of this cluster's nodes never overlap
            head_ports = _free_port_range(head_ip, worker_ports_per_node, taken)
            gcs_port = _free_port(head_ip)
            address = f"{head_ip}:{gcs_port}"
            processes.append(
                _start_node("head", head_ip, None, root, cpus_per_node, head_ports, env, gcs_port=gcs_port)
            )
            for i, host in enumerate(hosts, start=1):
                ip = host.address if host is not None else head_ip
                ports = _free_port_range(head_ip, worker_ports_per_node, taken)
                processes.append(_start_node(f"worker-{i}", ip, host, root, cpus_per_node, ports, env, join=address))
            alive = _wait_for_nodes(address, processes, env, start_timeout)
            by_port = {int(n["port"]): n for n in alive}
            nodes = [
                RayNode(p.name, p.ip, p.host, str(by_port[p.node_manager_port]["id"]), str(p.temp_dir))
                for p in processes
            ]
            yield RayCluster(address, nodes, processes, str(root))
        finally:
            for node in reversed(processes):  # workers first, the head (GCS) last
                try:
                    _kill_node(node, graceful_timeout=10)
                finally:
                    node.log.close()
            shutil.rmtree(root, ignore_errors=True)
