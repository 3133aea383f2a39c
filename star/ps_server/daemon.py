"""`star ps`: run one parameter-server daemon until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import grpc
import torch

from star.ps_server.checkpointing import restore_shard
from star.ps_server.config import PSConfig
from star.ps_server.doorbell import DoorbellServer
from star.ps_server.handover import take_over
from star.ps_server.metrics import start_ps_metrics
from star.ps_server.server import ParameterServer
from star.ps_server.socket_channel import SocketChannelServer
from star.logs import log
from star.rpc import star_pb2_grpc as pb_grpc
from star.rpc.common import CHANNEL_OPTIONS, EXCLUSIVE_PORT, address, tune_malloc, write_ready_file
from star.rpc.security import Credentials
from star.shm import doorbell_path

logger = logging.getLogger("ps")


async def serve(config: PSConfig, ready_file: str | None = None) -> None:
    """Run until SIGINT/SIGTERM, then stop accepting RPCs and exit cleanly."""
    torch.set_num_threads(config.threads)
    tune_malloc()
    credentials = Credentials.load(config.security)
    server = grpc.aio.server(options=CHANNEL_OPTIONS + EXCLUSIVE_PORT, interceptors=credentials.server_interceptors(aio=True))
    servicer = ParameterServer(config)
    version_at_exit = servicer.checkpointer.open_version_file(config.ps_index) if servicer.checkpointer else None
    if config.restore_dir:
        checkpoint = restore_shard(config.restore_dir, config.ps_index)
        if checkpoint is not None:
            same_dir = config.checkpoint_dir and Path(config.checkpoint_dir).resolve() == Path(config.restore_dir).resolve()
            servicer.restore(checkpoint, version_at_exit if same_dir else None, resumed=config.resumed)
            await servicer.final_checkpoint()  # the restore (and its counters) survives the next crash too
        else:
            log(logger, logging.WARNING, "no checkpoint to restore: starting fresh", restore_dir=config.restore_dir,
                updates_lost=version_at_exit or 0)
            if version_at_exit:  # it had trained (and died before any checkpoint): say so, the workers re-initialise it
                servicer.aggregator.counters["restores"] += 1
                servicer.aggregator.counters["updates_lost_in_restart"] += version_at_exit
    pb_grpc.add_ParameterServerServicer_to_server(servicer, server)
    port = credentials.add_port(server, address(config.host, config.port))
    if port == 0:
        raise SystemExit(f"ps{config.ps_index}: could not bind {config.host}:{config.port}")
    await server.start()
    doorbell = await _start_doorbell(servicer, config, credentials)
    channel = _start_socket_channel(servicer, config, credentials)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if config.migrate_from:
        await take_over(servicer, config, credentials, address(config.host, port))
    metrics_port = start_ps_metrics(servicer, loop, config.host, config.metrics_port) if config.metrics_port is not None else None
    write_ready_file(ready_file, port=port, role="ps", index=config.ps_index, metrics_port=metrics_port)
    log(logger, logging.INFO, "serving", address=address(config.host, port), ps_index=config.ps_index, num_ps=config.num_ps,
        tls=credentials.cert_pem is not None, authenticated=credentials.token is not None)
    await stop.wait()
    log(logger, logging.INFO, "shutting down", **servicer.aggregator.accounting())
    await server.stop(grace=1.0)
    if doorbell is not None:
        await doorbell.close()
    if channel is not None:
        channel.close()
    servicer.mailboxes.close()
    await servicer.final_checkpoint()


async def _start_doorbell(servicer: ParameterServer, config: PSConfig, credentials: Credentials) -> DoorbellServer | None:
    """The same-host header socket offered with every mailbox; None (headers by gRPC) when off or it cannot be made."""
    if not (config.shm and config.shm_doorbell):
        return None
    doorbell = DoorbellServer(servicer, doorbell_path(config.job_id, config.ps_index), credentials.token)
    try:
        await doorbell.start()
    except OSError as exc:
        log(logger, logging.WARNING, "no doorbell: same-host headers go by gRPC", path=str(doorbell.path), error=str(exc))
        return None
    servicer.mailboxes.doorbell = str(doorbell.path)
    return doorbell


def _start_socket_channel(servicer: ParameterServer, config: PSConfig, credentials: Credentials) -> SocketChannelServer | None:
    """The TCP port offered with every mailbox to workers on other hosts; None (their payloads go by gRPC) when
    off or it cannot be bound."""
    if not (config.shm and config.socket_channel):
        return None
    channel = SocketChannelServer(servicer, asyncio.get_running_loop(), config.host, credentials.token,
                                  credentials.ssl_server_context())
    try:
        servicer.mailboxes.socket_port = channel.start()
    except OSError as exc:
        log(logger, logging.WARNING, "no socket channel: other hosts' payloads go by gRPC", host=config.host, error=str(exc))
        return None
    return channel
