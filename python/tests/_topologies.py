"""Throwaway deployments for test_topologies.py: a 3-master Redis Cluster, a master
watched by one Sentinel, and redis-server over TLS (server-auth and mutual).

The server binary is $DLM_REDIS_SERVER (a redis-server or a valkey-server), else redis-server on
the PATH; the cluster is joined with $DLM_REDIS_CLI, else redis-cli. The TLS fixtures skip the
test when the binary is built without TLS.

Not a conftest: the test module imports the fixtures from here. Every process listens on
127.0.0.1:<free port> (never 6379), saves nothing, and is killed by its pid when the fixture
ends, also when a test or the setup itself failed.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest

from dlm.testing import server_executable

from _servers import free_port


@dataclass
class Deployment:
    """How to reach one deployment: `dlm.Client(url, **kwargs)`."""

    name: str
    url: str
    kwargs: dict[str, Any] = field(default_factory=dict)


class Procs:
    """Processes started for one fixture; stop() kills them all by pid."""

    def __init__(self) -> None:
        self.procs: list["subprocess.Popen[bytes]"] = []

    def start(self, args: list[str], log: Path) -> "subprocess.Popen[bytes]":
        with open(log, "wb") as out:
            p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        self.procs.clear()


def _exe(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        pytest.skip(f"{name} is not installed")
    return exe


def _server_exe() -> str:
    exe = server_executable()
    if exe is None:
        pytest.skip("redis-server is not installed (or set $DLM_REDIS_SERVER)")
    return exe


def _tls_unsupported(log: Path) -> Optional[str]:
    """Why the server whose log this is could not serve TLS, if that is why it exited: a binary
    built without TLS refuses `tls-port` (Redis 6.2: `Bad directive`) or finds no TLS
    connection type (Redis 7+, Valkey: `Failed finding TLS support`)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    if "Failed finding TLS support" in text or ("Bad directive" in text and "tls-" in text):
        return f"{server_executable()} is built without TLS support"
    return None


def command(port: int, *args: str, ctx: Optional[ssl.SSLContext] = None, timeout: float = 2.0) -> bytes:
    """One inline command to 127.0.0.1:port (TLS with ctx); the raw first reply chunk."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s: socket.socket = ctx.wrap_socket(raw, server_hostname="127.0.0.1") if ctx is not None else raw
    with s:
        parts = [f"${len(a)}\r\n{a}\r\n" for a in args]
        s.sendall(f"*{len(args)}\r\n{''.join(parts)}".encode())
        out = b""
        s.settimeout(timeout)
        while not out.endswith(b"\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        # bulk replies: read the rest of the announced length
        if out.startswith(b"$") and int(out.split(b"\r\n", 1)[0][1:]) >= 0:
            n = int(out.split(b"\r\n", 1)[0][1:])
            head = len(out.split(b"\r\n", 1)[0]) + 2
            while len(out) < head + n + 2:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        return out


def wait_until(cond: Callable[[], bool], timeout: float, what: str, procs: Procs) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what}: process {p.args!r} exited with {p.returncode}")
        try:
            if cond():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def _start_redis(procs: Procs, d: Path, extra: Callable[[int], list[str]],
                 ready: Optional[Callable[[int], bool]] = None) -> int:
    """redis-server with the args extra(port) on a free port (another one if the port got
    taken meanwhile); returns the port once `ready(port)` (default: PING answers)."""
    exe = _server_exe()
    for _ in range(10):
        p = free_port()
        log = d / f"redis-{p}.log"
        proc = procs.start([exe, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                            "--dir", str(d), "--daemonize", "no", *extra(p)], log)
        check = ready or (lambda q: command(q, "PING").startswith(b"+PONG"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if check(p):
                    return p
            except OSError:
                pass
            time.sleep(0.03)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        procs.procs.remove(proc)
        why = _tls_unsupported(log)
        if why is not None:
            pytest.skip(why)
    raise RuntimeError(f"could not start redis-server (see logs in {d})")


# ---------------------------------------------------------------- Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """Three masters (no replicas) joined with `redis-cli --cluster create`."""
    cli = _exe(os.environ.get("DLM_REDIS_CLI") or "redis-cli")
    d = tmp_path_factory.mktemp("cluster")
    procs = Procs()
    try:
        ports: list[int] = []
        for _ in range(3):
            ports.append(_start_redis(procs, d, lambda p: [
                "--port", str(p), "--cluster-enabled", "yes",
                "--cluster-config-file", str(d / f"nodes-{p}.conf")]))
        r = subprocess.run([cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                            "--cluster-replicas", "0", "--cluster-yes"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {r.stdout}\n{r.stderr}")
        wait_until(lambda: all(b"cluster_state:ok" in command(p, "CLUSTER", "INFO") for p in ports),
                   30, "cluster_state:ok on every node", procs)
        yield Deployment("cluster", f"redis://127.0.0.1:{ports[0]}", {
            "urls": [f"redis://127.0.0.1:{p}" for p in ports[1:]], "cluster": True})
    finally:
        procs.stop()


# ---------------------------------------------------------------- Sentinel


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """One master and one Sentinel (quorum 1) monitoring it as `mymaster`."""
    d = tmp_path_factory.mktemp("sentinel")
    procs = Procs()
    try:
        master = _start_redis(procs, d, lambda p: ["--port", str(p)])
        conf = d / "sentinel.conf"  # Sentinel rewrites its config: a file of its own, writable

        def sentinel_args(p: int) -> list[str]:
            conf.write_text(
                f"port {p}\nbind 127.0.0.1\ndir {d}\n"
                f"sentinel monitor mymaster 127.0.0.1 {master} 1\n"
                "sentinel down-after-milliseconds mymaster 5000\n")
            return [str(conf), "--sentinel"]

        # redis-server <conf> --sentinel: the config file must come first
        exe = _server_exe()
        port = 0
        for _ in range(10):
            p = free_port()
            proc = procs.start([exe, *sentinel_args(p)], d / f"sentinel-{p}.log")
            try:
                wait_until(lambda: command(p, "PING").startswith(b"+PONG"), 10, "sentinel", procs)
                port = p
                break
            except RuntimeError:
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
                procs.procs.remove(proc)
        if not port:
            raise RuntimeError(f"could not start redis-sentinel (see logs in {d})")

        def knows_master() -> bool:
            addr = command(port, "SENTINEL", "get-master-addr-by-name", "mymaster")
            info = command(port, "SENTINEL", "master", "mymaster")
            # flags exactly "master": connected, not s_down/o_down
            return f"${len(str(master))}\r\n{master}\r\n".encode() in addr \
                and b"$5\r\nflags\r\n$6\r\nmaster\r\n" in info

        wait_until(knows_master, 20, "the sentinel to report mymaster", procs)
        yield Deployment("sentinel", f"redis://127.0.0.1:{port}", {"sentinel": "mymaster"})
    finally:
        procs.stop()


# ---------------------------------------------------------------- TLS


def _openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run([_exe("openssl"), *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {r.stderr}")


@dataclass
class Pki:
    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, a server cert for 127.0.0.1/localhost and a client cert, made with openssl."""
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=dlm test CA",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=d)
    (d / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
        "basicConstraints=CA:FALSE\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n")
    for who in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}",
                 "-keyout", f"{who}.key", "-out", f"{who}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", f"{who}.ext", "-out", f"{who}.crt", cwd=d)
    return Pki(d, d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt", d / "client.key")


def _tls_server(pki: Pki, mutual: bool) -> Iterator[Deployment]:
    d = pki.dir / ("mtls" if mutual else "tls")
    d.mkdir()
    procs = Procs()
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if mutual:
        ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    try:
        port = _start_redis(procs, d, lambda p: [
            "--port", "0", "--tls-port", str(p), "--tls-cert-file", str(pki.server_cert),
            "--tls-key-file", str(pki.server_key), "--tls-ca-cert-file", str(pki.ca),
            "--tls-auth-clients", "yes" if mutual else "no"],
            ready=lambda p: command(p, "PING", ctx=ctx).startswith(b"+PONG"))
        kw: dict[str, Any] = {"cacert": str(pki.ca)}
        if mutual:
            kw.update(cert=str(pki.client_cert), key=str(pki.client_key))
        yield Deployment("mtls" if mutual else "tls", f"rediss://127.0.0.1:{port}", kw)
    finally:
        procs.stop()


@pytest.fixture(scope="module")
def tls(pki: Pki) -> Iterator[Deployment]:
    """redis-server on a TLS port only, clients not authenticated (`--tls-auth-clients no`)."""
    yield from _tls_server(pki, mutual=False)


@pytest.fixture(scope="module")
def mtls(pki: Pki) -> Iterator[Deployment]:
    """redis-server on a TLS port only, client certificates required (mutual TLS)."""
    yield from _tls_server(pki, mutual=True)
