"""Job-token authentication and TLS on real daemons: strangers are refused before any state changes,
the right credentials work, and a default `star launch` is authenticated end to end without the
token ever appearing on a command line."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import threading
import time
from pathlib import Path

import grpc
import psutil
import pytest
import torch

from star.config import JobConfig, SecurityConfig, from_dict
from star.launch import TOKEN_FILE_NAME, launch
from star.plan import asgd
from star.processes import ProcessGroup, _wait_ready
from star.rpc import star_pb2 as pb
from star.rpc import star_pb2_grpc as pb_grpc
from star.rpc.common import CHANNEL_OPTIONS, CONTROL_CHANNEL_OPTIONS, address
from star.rpc.ps_client import PSClient
from star.rpc.security import TOKEN_ENV, Credentials
from star.rpc.socket_channel import SocketChannel

pytestmark = pytest.mark.integration

TOKEN = "a" * 24 + "-right-token-for-this-job"
NUMEL = 256


def _ps_state(client: PSClient) -> tuple:
    stats = client.stats()[0]
    params = torch.empty(NUMEL)
    client.pull(params, timeout_s=10, observer=True)
    return (stats.version, stats.plan_epoch, stats.accepted, stats.applied, stats.dropped, stats.pending), params


def _setup_ps(addresses: list[str], credentials: Credentials) -> PSClient:
    client = PSClient(addresses, worker_id=0, credentials=credentials)
    client.wait_ready(30)
    replies = client.register(NUMEL)
    client.init_if_needed(torch.zeros(NUMEL), replies)
    client.configure(asgd([0, 1], epoch=1))
    return client


# ---------------------------------------------------------------- job token


@pytest.mark.parametrize(
    "token, message",
    [(None, "missing job token"), ("b" * 32, "wrong job token")],
    ids=["no_token", "wrong_token"],
)
def test_ps_refuses_every_rpc_without_the_right_token_and_changes_nothing(cluster, monkeypatch, token, message):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    addresses = cluster.start_ps(1)
    good = _setup_ps(addresses, Credentials(token=TOKEN))
    good.pull(torch.empty(NUMEL), timeout_s=10)
    before = _ps_state(good)
    stranger = PSClient(addresses, worker_id=0, credentials=Credentials(token=token))
    stranger.views = list(good.views)
    attempts = {
        "Register": lambda: stranger.register(NUMEL),
        "Push": lambda: stranger.push(torch.ones(NUMEL), iteration=0, timeout_s=10),
        "Pull": lambda: stranger.pull(torch.empty(NUMEL), timeout_s=10),
        "ConfigurePlan": lambda: stranger.configure(asgd([0, 1, 2], epoch=2)),
        "Stats": lambda: stranger.stats(),
    }
    try:
        for name, call in attempts.items():
            with pytest.raises(grpc.RpcError) as error:
                call()
            assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED, name
            assert message in error.value.details(), name
            assert TOKEN not in error.value.details()
    finally:
        stranger.close()
    after = _ps_state(good)
    assert after[0] == before[0]
    assert torch.equal(after[1], before[1])
    # The rightful worker is unaffected: its pending pull record still lets it push.
    assert good.push(torch.ones(NUMEL), iteration=0, timeout_s=10)[0].status == "applied"
    good.close()


def _start_coordinator(group: ProcessGroup, tmp_path: Path, ps_address: str) -> str:
    ready = tmp_path / "logs" / "coordinator.ready"
    child = group.spawn(
        "coordinator",
        ["coordinator", "--ps-addresses", ps_address, "--workers", "2", "--task", "digits", "--out", str(tmp_path / "run"),
         "--startup-timeout-s", "600", "--ready-file", str(ready)],
    )
    return address("127.0.0.1", _wait_ready(group, child, ready, 60.0))


def test_coordinator_refuses_reports_without_the_right_token_and_records_nothing(cluster, monkeypatch, tmp_path):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    ps_address = cluster.start_ps(1)[0]
    coordinator = _start_coordinator(cluster.group, tmp_path, ps_address)
    report = pb.IterationReport(worker_id=0, iteration=5, compute_s=0.01, push_s=0.01, pull_s=0.01, batch_size=32, slowdown=1.0)
    opened = {
        name: credentials.channel(coordinator, CONTROL_CHANNEL_OPTIONS)
        for name, credentials in {"none": Credentials(), "wrong": Credentials(token="c" * 40), "right": Credentials(token=TOKEN)}.items()
    }
    channels = {name: pb_grpc.CoordinatorStub(channel) for name, channel in opened.items()}
    try:
        for name in ("none", "wrong"):
            for call in (
                lambda stub: stub.Report(report, timeout=10),
                lambda stub: stub.Join(pb.JoinRequest(worker_id=0), timeout=10),
                lambda stub: stub.JobStatus(pb.JobStatusRequest(), timeout=10),
            ):
                with pytest.raises(grpc.RpcError) as error:
                    call(channels[name])
                assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED, name
        right = channels["right"]
        assert right.JobStatus(pb.JobStatusRequest(), timeout=10).max_iteration == 0
        right.Report(report, timeout=10)
        assert right.JobStatus(pb.JobStatusRequest(), timeout=10).max_iteration == 5
    finally:
        for channel in opened.values():
            channel.close()


# ---------------------------------------------------------------- TLS

def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(cwd: Path, name: str) -> None:
    _openssl(cwd, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}")


def _make_leaf(cwd: Path, ca: str, name: str) -> None:
    (cwd / f"{name}.ext").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n"
    )
    _openssl(cwd, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
    _openssl(cwd, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make test certificates")
    directory = tmp_path_factory.mktemp("certs")
    _make_ca(directory, "ca")
    _make_ca(directory, "other-ca")
    _make_leaf(directory, "ca", "server")
    _make_leaf(directory, "ca", "client")
    return directory


def _stats(address_: str, credentials: Credentials) -> pb.PsStats:
    channel = credentials.channel(address_, CHANNEL_OPTIONS)
    try:
        return pb_grpc.ParameterServerStub(channel).Stats(pb.StatsRequest(), timeout=5)
    finally:
        channel.close()


def _tls_flags(certs: Path, mutual: bool) -> list[str]:
    flags = ["--security.tls_cert_file", str(certs / "server.pem"), "--security.tls_key_file", str(certs / "server.key")]
    if mutual:
        flags += ["--security.tls_ca_file", str(certs / "ca.pem"), "--security.tls_require_client_cert"]
    return flags


def test_tls_server_is_reachable_only_by_clients_that_trust_its_ca(cluster, certs, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    ps = cluster.start_ps(1, *_tls_flags(certs, mutual=False))[0]
    trusted = Credentials.load(SecurityConfig(tls_ca_file=str(certs / "ca.pem")))
    assert _stats(ps, trusted).ps_index == 0
    for name, stranger in {
        "wrong_ca": Credentials.load(SecurityConfig(tls_ca_file=str(certs / "other-ca.pem"))),
        "plaintext": Credentials(),
    }.items():
        with pytest.raises(grpc.RpcError) as error:
            _stats(ps, stranger)
        assert error.value.code() == grpc.StatusCode.UNAVAILABLE, name
    log = next((cluster.tmp_path / "logs").glob("ps0-*.log")).read_text()
    assert "runs unauthenticated" in log  # no token configured: still served, with a warning


def test_mutual_tls_refuses_clients_without_a_certificate_from_the_ca(cluster, certs, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)  # TLS and the job token together
    ps = cluster.start_ps(1, *_tls_flags(certs, mutual=True))[0]
    with_cert = Credentials.load(SecurityConfig(
        tls_ca_file=str(certs / "ca.pem"), tls_cert_file=str(certs / "client.pem"), tls_key_file=str(certs / "client.key")))
    assert _stats(ps, with_cert).ps_index == 0
    with pytest.raises(grpc.RpcError) as error:
        _stats(ps, dataclasses.replace(with_cert, token=None))
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
    without_cert = Credentials.load(SecurityConfig(tls_ca_file=str(certs / "ca.pem")))
    with pytest.raises(grpc.RpcError) as error:
        _stats(ps, without_cert)
    assert error.value.code() == grpc.StatusCode.UNAVAILABLE


def test_the_socket_channel_speaks_tls_with_the_same_certificates_and_refuses_plaintext(cluster, certs, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    ps = cluster.start_ps(1, *_tls_flags(certs, mutual=True))
    with_cert = Credentials.load(SecurityConfig(
        tls_ca_file=str(certs / "ca.pem"), tls_cert_file=str(certs / "client.pem"), tls_key_file=str(certs / "client.key")))
    numel = 1000
    with PSClient(ps, worker_id=0, credentials=with_cert, transport="socket") as client:
        client.wait_ready(30)
        client.init_if_needed(torch.ones(numel), client.register(numel))
        client.configure(asgd([0], epoch=1))
        params = torch.empty(numel)
        client.pull(params, timeout_s=10)
        assert client.push(torch.ones(numel), iteration=0, timeout_s=10)[0].status == "applied"
        client.pull(params, timeout_s=10)
        assert torch.allclose(params, torch.full((numel,), 0.9)) and client.transport_used == "socket"
        assert client.stats()[0].counters["socket_pushes"] == 1
        host, port = "127.0.0.1", client.sockets[0]._sock.getpeername()[1]
    for name, stranger in {"plaintext": Credentials(token=TOKEN),
                           "no_client_cert": Credentials.load(SecurityConfig(tls_ca_file=str(certs / "ca.pem")))}.items():
        stranger = dataclasses.replace(stranger, token=TOKEN)
        with pytest.raises((OSError, grpc.RpcError)):
            SocketChannel(host, port, stranger).close()
            pytest.fail(f"{name}: connected")


# ---------------------------------------------------------------- a launched job


def _watch_children(stop: threading.Event, seen: dict[int, tuple[list[str], dict[str, str]]]) -> None:
    me = psutil.Process()
    while not stop.is_set():
        for child in me.children(recursive=True):
            if child.pid in seen and "star.cli" in seen[child.pid][0]:
                continue
            try:  # read again until it shows a daemon's argv: caught between fork and exec, it shows the parent's
                seen[child.pid] = (child.cmdline(), child.environ())
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        time.sleep(0.05)


def test_a_default_launch_is_authenticated_end_to_end_and_keeps_the_token_off_argv(tmp_path, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    config = from_dict(JobConfig, {"task": "digits", "workers": 2, "ps": 1, "out": str(tmp_path), "max_time_s": 60.0,
                                   "target": 0.8})  # training end to end is the point, not the last points of accuracy
    seen: dict[int, tuple[list[str], dict[str, str]]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_children, args=(stop, seen), daemon=True)
    watcher.start()
    try:
        result = launch(config)
    finally:
        stop.set()
        watcher.join(timeout=5)
    assert result["reached"], result
    token_file = tmp_path / TOKEN_FILE_NAME
    token = token_file.read_text().strip()
    assert len(token) == 64
    assert token_file.stat().st_mode & 0o077 == 0  # owner-only
    daemons = {pid: (argv, env) for pid, (argv, env) in seen.items() if "star.cli" in argv}
    roles = sorted(argv[argv.index("star.cli") + 1] for argv, _ in daemons.values())
    assert roles == ["coordinator", "ps", "worker", "worker"], roles
    for argv, env in daemons.values():
        assert not any(token in arg for arg in argv), argv
        assert env.get(TOKEN_ENV) == token  # handed over through the environment
        assert argv[argv.index("--job") + 1] == str(tmp_path / "config.toml")  # the job file every child derives its config from
    assert token not in (tmp_path / "config.toml").read_text()
