"""A Ray cluster of separate nodes on this machine, for tests: a head that runs nothing
(`--num-cpus 0`) and worker nodes of one CPU each, every node its own `ray start` process group
with its own temporary folder and ports. Everything it starts carries a marker in its environment,
so that teardown ends exactly those processes (and no other Ray on the machine)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
MARKER = "SEPO_TEST_RAY_CLUSTER"
OBJECT_STORE = 100 * 2**20
"""Each node's object store (bytes): cells pass no data through it."""
ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
"""A test cluster asks for no token (Ray turns token authentication on for a new head by default)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _parent(pid: int) -> int:
    stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
    return int(stat.rsplit(")", 1)[1].split()[1]) if ")" in stat else -1


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


class RayCluster:
    """`with RayCluster(workers=2) as cluster:` ... `cluster.address`; `cluster.kill_node(0)` ends
    worker node 0's raylet (SIGKILL, by its PID)."""

    def __init__(self, workers: int = 2, start_timeout: float = 120.0):
        self.root = tempfile.mkdtemp(prefix="sr", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
        self.marker = f"{MARKER}={self.root}".encode()
        self.env = {**os.environ, **ENV, MARKER: self.root}
        self.env.pop("RAY_ADDRESS", None)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.workers = workers
        self.start_timeout = start_timeout
        self.nodes: list[subprocess.Popen] = []

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        log = open(os.path.join(self.root, f"{name}.log"), "wb")
        ports = [
            "--node-manager-port",
            "--object-manager-port",
            "--dashboard-agent-listen-port",
            "--dashboard-agent-grpc-port",
            "--runtime-env-agent-port",
            "--metrics-export-port",
        ]
        command = [
            RAY,
            "start",
            "--block",
            "--disable-usage-stats",
            "--temp-dir",
            os.path.join(self.root, name),
            "--object-store-memory",
            str(OBJECT_STORE),
            "--min-worker-port",
            "0",
            "--max-worker-port",
            "0",
            "--include-log-monitor",
            "false",
            *[x for p in ports for x in (p, str(free_port()))],
            *args,
        ]
        try:
            return subprocess.Popen(
                command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            log.close()

    def __enter__(self) -> "RayCluster":
        try:
            self.nodes.append(
                self._start(
                    "head",
                    "--head",
                    "--port",
                    str(self.port),
                    "--num-cpus",
                    "0",
                    "--include-dashboard",
                    "false",
                    "--dashboard-port",
                    str(free_port()),
                    "--ray-client-server-port",
                    str(free_port()),
                )
            )
            self.nodes += [
                self._start(f"w{k}", "--address", self.address, "--num-cpus", "1")
                for k in range(self.workers)
            ]
            self._wait_for_nodes()
        except BaseException:
            self.close()
            raise
        return self

    def _wait_for_nodes(self) -> None:
        """Until every worker node's raylet has registered with the head (its CPU is the cluster's)."""
        script = (
            "import ray, sys, time\n"
            f"ray.init(address={self.address!r}, log_to_driver=False, configure_logging=False)\n"
            f"while ray.cluster_resources().get('CPU', 0) < {self.workers}: time.sleep(0.2)\n"
        )
        try:
            subprocess.run(
                [sys.executable, "-c", script],
                env=self.env,
                timeout=self.start_timeout,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except (subprocess.TimeoutExpired, subprocess.CalledProcessError) as error:
            logs = {p.name: p.read_text(errors="replace")[-1500:] for p in Path(self.root).glob("*.log")}
            raise RuntimeError(f"the test Ray cluster did not come up ({error}): {logs}") from None

    def raylet(self, worker: int) -> int:
        """PID of worker node `worker`'s raylet."""
        parent = self.nodes[1 + worker].pid
        found = [
            p for p in _pids() if _parent(p) == parent and b"raylet/raylet" in _read(f"/proc/{p}/cmdline")
        ]
        assert found, f"worker node {worker} has no raylet"
        return found[0]

    def running_cells(self, worker: int) -> list[int]:
        """PIDs of the Ray worker processes running a cell on worker node `worker`."""
        raylet = self.raylet(worker)
        return [
            p
            for p in _pids()
            if _parent(p) == raylet and _read(f"/proc/{p}/cmdline").startswith(b"ray::_run_cell")
        ]

    def kill_node(self, worker: int) -> int:
        raylet = self.raylet(worker)
        os.kill(raylet, signal.SIGKILL)
        return raylet

    def ours(self) -> list[int]:
        """Every live process this cluster started (its environment carries the marker)."""
        return [
            p for p in _pids() if p != os.getpid() and self.marker in _read(f"/proc/{p}/environ").split(b"\0")
        ]

    def close(self) -> None:
        """End every process of the cluster at once (SIGKILL: a graceful `ray stop` takes half a minute
        here): each node's process group, then anything left carrying the marker; remove its folder."""
        for _ in range(3):
            for node in self.nodes:
                try:
                    os.killpg(node.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for pid in self.ours():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for node in self.nodes:
                try:
                    node.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            time.sleep(0.2)
            if not self.ours():
                break
        shutil.rmtree(self.root, ignore_errors=True)

    def __exit__(self, *exc) -> None:
        self.close()
