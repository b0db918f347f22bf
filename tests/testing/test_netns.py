"""``rollouthub.testing.netns``: namespaces reach the root namespace's gateways; with ``route_between`` they also
reach each other (IPv4 forwarding on while they exist, the previous setting restored afterwards).

Skipped only where network namespaces cannot be created (not root, no iproute2); CI runs it as root.
"""

from __future__ import annotations

import subprocess
import sys
from typing import List

import pytest

from rollouthub.testing.netns import IP_FORWARD, Host, namespaces_unavailable_reason, network_namespaces

pytestmark = pytest.mark.timeout(60)

# Listens on the namespace's address, answers one connection with "pong"; prints "ready" once listening.
LISTEN = (
    "import socket, sys\n"
    "s = socket.create_server((sys.argv[1], 4747))\n"
    "print('ready', flush=True)\n"
    "s.settimeout(20)\n"
    "c, _ = s.accept()\n"
    "c.sendall(b'pong')\n"
)
# Connects to the address (2 s at most) and prints what it got, or the error's class name.
CONNECT = (
    "import socket, sys\n"
    "try:\n"
    "    with socket.create_connection((sys.argv[1], 4747), timeout=2) as c:\n"
    "        print(c.recv(4).decode())\n"
    "except OSError as e:\n"
    "    print(type(e).__name__)\n"
)


@pytest.fixture(autouse=True)
def _namespaces_available() -> None:
    reason = namespaces_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def forwarding() -> str:
    with open(IP_FORWARD) as switch:
        return switch.read().strip()


def reach(server: Host, client: Host) -> str:
    """What ``client`` gets when it connects to a listener on ``server``'s address."""
    listener = subprocess.Popen(
        server.command([sys.executable, "-c", LISTEN, server.address]), stdout=subprocess.PIPE, text=True
    )
    try:
        assert listener.stdout is not None and listener.stdout.readline().strip() == "ready"
        answer = subprocess.run(
            client.command([sys.executable, "-c", CONNECT, server.address]), capture_output=True, text=True, timeout=20
        )
        return answer.stdout.strip()
    finally:
        listener.kill()
        listener.wait(timeout=10)


def test_namespaces_reach_each_other_only_with_route_between() -> None:
    before = forwarding()
    if before == "1":
        pytest.skip("IPv4 forwarding is already on machine-wide: namespaces reach each other anyway")
    hosts: List[Host]
    with network_namespaces(2) as hosts:
        assert forwarding() == "0"
        assert reach(hosts[0], hosts[1]) != "pong"  # the root namespace does not forward between them
    with network_namespaces(2, route_between=True) as hosts:
        assert forwarding() == "1"
        assert reach(hosts[0], hosts[1]) == "pong"
        assert reach(hosts[1], hosts[0]) == "pong"
    assert forwarding() == before  # restored on exit
