"""The same-host doorbell, PS side: PushShm and PullShm headers from a Unix socket (star/rpc/doorbell.py
says why). It runs on the PS's asyncio loop beside grpc.aio and hands every request to the servicer's
own PushShm / PullShm, so the aggregator sees the same calls whichever way the header came.

A connection starts with a hello carrying the job token (compared as the gRPC interceptor compares it);
then one request at a time. A pull that waits for its round watches its connection: a client that hangs
up cancels it, as a cancelled RPC does, so the aggregator forgets the waiting pull.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
from pathlib import Path

import grpc
from google.protobuf.message import DecodeError

from star.logs import log
from star.rpc import star_pb2 as pb
from star.rpc.common import MOVED_TO_KEY
from star.rpc.doorbell import FRAME, DoorbellBroken, encode, error_reply, frame_length

logger = logging.getLogger("ps")


class _Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str, moved_to: str):
        super().__init__(details)
        self.code, self.details, self.moved_to = code, details, moved_to


class _DoorbellContext:
    """What the servicer's PushShm / PullShm use of a grpc.aio.ServicerContext: abort()."""

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata=()) -> None:
        moved_to = next((value for key, value in trailing_metadata or () if key == MOVED_TO_KEY), "")
        raise _Aborted(code, details, moved_to)


class DoorbellServer:
    """Serves one PS's doorbell socket at `path` (created 0600; removed by close())."""

    def __init__(self, servicer, path: Path, token: str | None):
        self.servicer, self.path, self.token = servicer, path, token
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.path.unlink(missing_ok=True)
        self._server = await asyncio.start_unix_server(self._connection, path=str(self.path))
        os.chmod(self.path, 0o600)  # before any worker learns the name (it is told at Register)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
        self.path.unlink(missing_ok=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if await self._hello(reader, writer):
                await self._serve(reader, writer)
        except (OSError, DoorbellBroken, DecodeError, asyncio.IncompleteReadError) as exc:
            log(logger, logging.DEBUG, "doorbell connection ended", error=str(exc))
        except asyncio.CancelledError:  # the PS is shutting down: end quietly (asyncio logs a cancelled handler)
            pass
        finally:
            writer.close()

    async def _hello(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        reply = hello_reply(self.servicer, await _read(reader), self.token, "doorbell")
        writer.write(encode(reply))
        await writer.drain()
        return reply.hello_ok

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            request = await _read(reader)
            if request is None:
                return
            if request.WhichOneof("body") != "pull":  # a push never waits for a round
                writer.write(encode(await self._answer(request)))
                await writer.drain()
                continue
            answer = asyncio.ensure_future(self._answer(request))
            if not answer.done():  # a pull waiting for its round: a hang-up cancels it
                hangup = asyncio.ensure_future(reader.read(1))
                await asyncio.wait((answer, hangup), return_when=asyncio.FIRST_COMPLETED)
                if not answer.done():  # the client left (or sent out of turn): as a cancelled RPC
                    answer.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await answer
                    return
                hangup.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await hangup
            writer.write(encode(answer.result()))
            await writer.drain()

    async def _answer(self, request: pb.DoorbellRequest) -> pb.DoorbellReply:
        reply = await answer(self.servicer, request, "doorbell")
        if reply.WhichOneof("body") != "error":
            self.servicer.mailboxes.doorbell_calls += 1
        return reply


def hello_reply(servicer, request: pb.DoorbellRequest | None, token: str | None, where: str) -> pb.DoorbellReply:
    """The answer to a connection's first frame: hello_ok, or UNAUTHENTICATED (no hello, a missing or wrong
    job token, compared as the gRPC interceptor compares it; counted in the servicer's refusals)."""
    if request is None or request.WhichOneof("body") != "hello":
        servicer.rejected[f"{where}_no_hello"] = servicer.rejected.get(f"{where}_no_hello", 0) + 1
        return error_reply(grpc.StatusCode.UNAUTHENTICATED, f"a {where} connection starts with a hello")
    if token is not None:
        given = request.hello.token
        if not given or not hmac.compare_digest(given.encode(), token.encode()):
            servicer.rejected["bad_token"] = servicer.rejected.get("bad_token", 0) + 1
            details = "missing job token" if not given else "wrong job token"
            return error_reply(grpc.StatusCode.UNAUTHENTICATED, f"{details} ({where})")
    return pb.DoorbellReply(hello_ok=True)


async def answer(servicer, request: pb.DoorbellRequest, where: str) -> pb.DoorbellReply:
    """A push or pull header handed to the servicer's own PushShm / PullShm (on the PS's loop), its result or
    refusal as a DoorbellReply; `timeout_s` > 0 is enforced here, as gRPC enforces a call's deadline."""
    kind = request.WhichOneof("body")
    context = _DoorbellContext()
    if kind == "push":
        call = servicer.PushShm(request.push, context)
    elif kind == "pull":
        call = servicer.PullShm(request.pull, context)
    else:
        return error_reply(grpc.StatusCode.INVALID_ARGUMENT, f"{where} request {kind!r}: only push and pull after the hello")
    try:
        result = await (asyncio.wait_for(call, request.timeout_s) if request.timeout_s > 0 else call)
    except _Aborted as aborted:
        return error_reply(aborted.code, aborted.details, aborted.moved_to)
    except asyncio.TimeoutError:
        return error_reply(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer within timeout_s={request.timeout_s:g}")
    except Exception as exc:  # what grpc.aio answers an unexpected servicer error with
        log(logger, logging.ERROR, f"{where} call failed", kind=kind, error=repr(exc))
        return error_reply(grpc.StatusCode.UNKNOWN, f"unexpected error in the parameter server: {exc!r}")
    return pb.DoorbellReply(push=result) if kind == "push" else pb.DoorbellReply(pull=result)


async def _read(reader: asyncio.StreamReader) -> pb.DoorbellRequest | None:
    """The next request, or None at a clean end of the connection."""
    try:
        prefix = await reader.readexactly(FRAME.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return None
    return pb.DoorbellRequest.FromString(await reader.readexactly(frame_length(prefix)))
