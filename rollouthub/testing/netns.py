"""Other "hosts" on one Linux machine: network namespaces joined to the root namespace by veth pairs (iproute2).

Tests and benchmarks use them to run runners and algorithms where ``127.0.0.1`` is *not* the store server, so that
nothing in the product may assume loopback (advertised URLs, wake-ups, authentication, OTLP exports)::

    reason = namespaces_unavailable_reason()          # None where namespaces can be created (root, iproute2)
    with network_namespaces(2) as hosts:
        server_host = hosts[0].gateway                 # a veth address of the root namespace, reachable from all
        subprocess.run(hosts[1].command(["python", "runner.py", f"http://{server_host}:{port}"]))

Each namespace gets one veth pair in its own ``/30`` subnet of a random ``10.x.y.0/24`` block: the namespace side is
``address`` (``.2``, ``.6``, ...), the root side ``gateway`` (``.1``, ``.5``, ...), and the namespace's default route
goes through its gateway -- so every namespace reaches every gateway address (the root namespace routes between
its interfaces), but not the root namespace's loopback; with ``route_between=True`` the root namespace also forwards
from one namespace to another (IPv4 forwarding on while they exist), so they reach each other's addresses. Names
carry the process id and a random suffix (several runs may share the machine); everything is deleted on exit, also
when the body fails, and namespaces left behind by a killed process are removed by the next run of this process
id... or by ``ip netns del`` (their names start with ``rhns``).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence

__all__ = ["Host", "namespaces_unavailable_reason", "network_namespaces"]


@dataclass(frozen=True)
class Host:
    """One network namespace: ``address`` (its own) and ``gateway`` (its veth peer in the root namespace)."""

    name: str
    address: str
    gateway: str

    def command(self, argv: Sequence[str]) -> List[str]:
        """``argv`` run inside this namespace (``ip netns exec``)."""
        return ["ip", "netns", "exec", self.name, *argv]


def _ip(*args: str) -> str:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def namespaces_unavailable_reason() -> Optional[str]:
    """Why network namespaces cannot be created here (``None`` when they can): not Linux, no ``ip`` (iproute2), not
    root, or the kernel refuses (e.g. inside a restricted container)."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux (this is {sys.platform})"
    if shutil.which("ip") is None:
        return "the 'ip' command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    probe = f"rhnsprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot create a network namespace: {exc}"
    try:
        _ip("netns", "del", probe)
    except (RuntimeError, OSError, subprocess.TimeoutExpired):
        pass
    return None


def _free_block() -> str:
    """A ``10.x.y`` prefix no interface of the root namespace uses."""
    used = _ip("-4", "-o", "addr", "show")
    for _ in range(100):
        prefix = f"10.{random.randint(64, 254)}.{random.randint(0, 255)}"
        if f" {prefix}." not in used:
            return prefix
    raise RuntimeError("no free 10.x.y.0/24 block for the namespaces' veth pairs")


IP_FORWARD = "/proc/sys/net/ipv4/ip_forward"
"""The root namespace's IPv4 forwarding switch: on, it routes packets between the namespaces' veth pairs."""


@contextmanager
def ip_forwarding() -> Iterator[None]:
    """IPv4 forwarding on in the root namespace for the body (namespaces then reach each other's addresses, as the
    machines of a real network do); the previous setting is restored on exit. A machine-wide switch: runs that
    share the machine and also need it must not overlap."""
    with open(IP_FORWARD) as switch:
        previous = switch.read().strip()
    if previous == "1":
        yield
        return
    with open(IP_FORWARD, "w") as switch:
        switch.write("1")
    try:
        yield
    finally:
        with open(IP_FORWARD, "w") as switch:
            switch.write(previous)


@contextmanager
def network_namespaces(count: int, route_between: bool = False) -> Iterator[List[Host]]:
    """Create ``count`` (1-60) namespaces, each joined to the root namespace by a veth pair; delete them on exit.

    With ``route_between`` the root namespace also forwards between them (:func:`ip_forwarding`): each namespace
    reaches the others' addresses, not only the gateways."""
    if not 1 <= count <= 60:
        raise ValueError(f"count must be between 1 and 60, got {count}")
    if route_between:
        with ip_forwarding(), network_namespaces(count) as routed:
            yield routed
        return
    tag = f"{os.getpid() % 100000}{uuid.uuid4().hex[:3]}"
    prefix = _free_block()
    hosts: List[Host] = []
    root_links: List[str] = []
    try:
        for i in range(count):
            name = f"rhns{tag}n{i}"
            outer, inner = f"rh{tag}h{i}", f"rh{tag}n{i}"  # interface names have at most 15 characters
            gateway, address = f"{prefix}.{4 * i + 1}", f"{prefix}.{4 * i + 2}"
            _ip("netns", "add", name)
            hosts.append(Host(name, address, gateway))
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            root_links.append(outer)
            _ip("link", "set", inner, "netns", name)
            _ip("addr", "add", f"{gateway}/30", "dev", outer)
            _ip("link", "set", outer, "up")
            _ip("-n", name, "addr", "add", f"{address}/30", "dev", inner)
            _ip("-n", name, "link", "set", inner, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "route", "add", "default", "via", gateway)
        yield hosts
    finally:
        for host in hosts:
            try:
                _ip("netns", "del", host.name)  # also destroys its end of the veth pair, hence the pair
            except (RuntimeError, OSError, subprocess.TimeoutExpired):
                pass
        for link in root_links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=30)  # already gone: fine
