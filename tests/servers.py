"""Real servers for tests: a PostgreSQL server from the installed binaries and a local Ray cluster.

``PostgresServer`` runs ``initdb``/``pg_ctl`` in a temp dir on a free localhost port (as the ``postgres``
user when the tests run as root: PostgreSQL refuses root) with trust authentication; ``fresh_url()`` creates
an empty database and returns its URL. ``ray_cluster`` starts ``ray.cluster_utils.Cluster``: a head node
without the measurement resource (it stays up) and ``nodes`` nodes with ``collage_measure: 1`` and one CPU.
Both skip (with the reason) only when their software is missing: ``.ci/run`` installs PostgreSQL, and
``make test`` installs the ``cluster`` extra.
"""
from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


#: ports Ray's components take by default (dashboard 8265, its agent's HTTP 52365, its gRPC 52366, the client
#: server 10001, GCS 6379): a free port the kernel hands out can be one of them, and Ray then refuses to start
#: ("dashboard_agent_http is trying to use a port number 52365 that is used by other components")
RAY_DEFAULT_PORTS = frozenset({6379, 8265, 10001, 52365, 52366})


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in RAY_DEFAULT_PORTS:
            return port


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for path in sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True):
        return path
    return None


class PostgresServer:
    """A throwaway PostgreSQL server (see the module docstring)."""

    def __init__(self) -> None:
        initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
        if not initdb or not pg_ctl:
            pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed: apt-get install postgresql")
        pytest.importorskip("psycopg", reason="psycopg is missing: pip install -e '.[cluster]'")
        self.pg_ctl = pg_ctl
        self.dir = Path(tempfile.mkdtemp(prefix="collage-pg-"))
        self.run_as: list[str] = []
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("running as root and there is no 'postgres' user to run the server as")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self.run_as = ["runuser", "-u", "postgres", "--"]
        self.port = free_port()
        self.data = self.dir / "data"
        self._run([initdb, "-D", str(self.data), "-A", "trust", "-U", "collage", "--no-sync", "-E", "UTF8"])
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._run([pg_ctl, "-D", str(self.data), "-o", opts, "-l", str(self.dir / "log"), "-w", "-t", "60", "start"])
        self.base = f"postgresql://collage@127.0.0.1:{self.port}"

    def _run(self, cmd: list[str]) -> None:
        proc = subprocess.run([*self.run_as, *cmd], capture_output=True, text=True, cwd=self.dir)
        if proc.returncode != 0:
            log = (self.dir / "log").read_text() if (self.dir / "log").exists() else ""
            raise RuntimeError(f"{cmd[0]} failed: {proc.stdout}{proc.stderr}{log}")

    def fresh_url(self) -> str:
        """A new empty database on this server."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(f"{self.base}/postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"{self.base}/{name}"

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run([self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def ray_cluster(nodes: int = 2, *, measure_on_head: bool = False, connect: bool = True) -> Iterator[object]:
    """A local Ray cluster (``ray.cluster_utils.Cluster``) with ``nodes`` measurement nodes (1 CPU each).

    With ``connect`` this process is its driver (``ray.init``). ``cluster.address`` is the GCS address
    (``HOST:PORT``), ``cluster.client_address`` the ``ray://`` address of its Ray Client server.
    """
    ray = pytest.importorskip("ray", reason="ray is missing: pip install -e '.[cluster]'")
    from ray.cluster_utils import Cluster

    head_res = {"collage_measure": 1} if measure_on_head else {}
    client_port = free_port()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": head_res, "include_dashboard": False, "ray_client_server_port": client_port,
        "_system_config": {"health_check_initial_delay_ms": 0, "health_check_period_ms": 1000,
                           "health_check_failure_threshold": 3}})
    try:
        for _ in range(nodes):
            add_measure_node(cluster)
        cluster.wait_for_nodes()
        cluster.client_address = f"ray://127.0.0.1:{client_port}"  # the Ray Client server on the head
        if connect:
            ray.init(address=cluster.address, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def add_measure_node(cluster: object) -> object:
    """One more measurement node (``collage_measure: 1``, one CPU) in a ``ray.cluster_utils.Cluster``."""
    return cluster.add_node(num_cpus=1, resources={"collage_measure": 1})


def measure_nodes(cluster: object) -> list:
    """The cluster's worker nodes (the head is not one of them in ``ray_cluster``)."""
    return list(cluster.worker_nodes)
