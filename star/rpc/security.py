"""Credentials of one process: the job token and optional TLS, for the channels it opens and the ports it serves.

The job token proves a caller belongs to the job. It is read from a file or from the
STAR_JOB_TOKEN environment variable, never from a command-line value (argv is readable
by every user of the host; a process's environment is not). Servers check it on every
RPC before any servicer code runs, so a refused call changes no state. TLS (optionally
mutual) protects it and the payloads on the wire.
"""

from __future__ import annotations

import collections
import hmac
import logging
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import grpc

from star.config import ConfigError, SecurityConfig
from star.logs import log

logger = logging.getLogger("security")

TOKEN_ENV = "STAR_JOB_TOKEN"  # how the launcher hands the token to its children
TOKEN_METADATA_KEY = "star-job-token"  # the gRPC metadata key the token travels under
MIN_TOKEN_CHARS = 16

_warned_unauthenticated = False


def _warn_unauthenticated_once(role: str) -> None:
    global _warned_unauthenticated
    if not _warned_unauthenticated:
        _warned_unauthenticated = True
        log(
            logger,
            logging.WARNING,
            f"no job token configured: {role} runs unauthenticated (set {TOKEN_ENV} or security.token_file)",
        )


def check_token(token: str, source: str) -> str:
    """A token must be long enough to guess at and printable ASCII (gRPC metadata values are)."""
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(source, f"<{len(token)} characters>", f"a job token needs at least {MIN_TOKEN_CHARS} characters")
    if not all(33 <= ord(c) <= 126 for c in token):
        raise ConfigError(source, "<hidden>", "a job token must be printable ASCII without spaces")
    return token


def load_token(config: SecurityConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The job token from security.token_file, else from STAR_JOB_TOKEN, else None."""
    if config.token_file is not None:
        try:
            text = Path(config.token_file).read_text()
        except OSError as exc:  # e.g. deleted after the config was checked
            raise ConfigError("security.token_file", config.token_file, f"cannot be read: {exc.strerror}") from None
        return check_token(text.strip(), "security.token_file")
    value = (os.environ if environ is None else environ).get(TOKEN_ENV, "").strip()
    return check_token(value, TOKEN_ENV) if value else None


def _read(path: str | None) -> bytes | None:
    return None if path is None else Path(path).read_bytes()


def _load_chain(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes | None) -> None:
    """ssl loads a certificate chain from files only: write it to a private directory, load it, remove it."""
    with tempfile.TemporaryDirectory(prefix="star-tls-") as private:  # 0700
        cert, key = Path(private) / "cert.pem", Path(private) / "key.pem"
        cert.write_bytes(cert_pem)
        if key_pem is not None:
            key.touch(mode=0o600)
            key.write_bytes(key_pem)
        context.load_cert_chain(cert, key if key_pem is not None else None)


@dataclass(frozen=True)
class Credentials:
    """What one process presents and checks. `repr` never shows the token or the key."""

    token: str | None = field(default=None, repr=False)
    cert_pem: bytes | None = field(default=None, repr=False)
    key_pem: bytes | None = field(default=None, repr=False)
    ca_pem: bytes | None = field(default=None, repr=False)
    require_client_cert: bool = False
    server_name: str | None = None

    @classmethod
    def load(cls, config: SecurityConfig | None = None, environ: Mapping[str, str] | None = None) -> "Credentials":
        config = config or SecurityConfig()
        return cls(
            token=load_token(config, environ),
            cert_pem=_read(config.tls_cert_file),
            key_pem=_read(config.tls_key_file),
            ca_pem=_read(config.tls_ca_file),
            require_client_cert=config.tls_require_client_cert,
            server_name=config.tls_server_name,
        )

    @property
    def client_tls(self) -> bool:
        return self.ca_pem is not None or self.cert_pem is not None

    # ---- client side -----------------------------------------------------------
    def channel(self, target: str, options: Sequence[tuple[str, object]]) -> grpc.Channel:
        """A channel that attaches the token to every call, over TLS when configured."""
        options = list(options)
        if self.client_tls:
            if self.server_name:
                options.append(("grpc.ssl_target_name_override", self.server_name))
            tls = grpc.ssl_channel_credentials(root_certificates=self.ca_pem, private_key=self.key_pem, certificate_chain=self.cert_pem)
            channel = grpc.secure_channel(target, tls, options=options)
        else:
            channel = grpc.insecure_channel(target, options=options)
        if self.token is None:
            _warn_unauthenticated_once("client")
            return channel
        return grpc.intercept_channel(channel, _AttachToken(self.token))

    # ---- server side -----------------------------------------------------------
    def add_port(self, server: grpc.Server | grpc.aio.Server, address: str) -> int:
        """Bind `address` (TLS when this process has a certificate); returns the port, 0 on failure (a port in use:
        gRPC raises, or returns 0, depending on its version)."""
        try:
            if self.cert_pem is None:
                return server.add_insecure_port(address)
            assert self.key_pem is not None
            tls = grpc.ssl_server_credentials(
                [(self.key_pem, self.cert_pem)],
                root_certificates=self.ca_pem if self.require_client_cert else None,
                require_client_auth=self.require_client_cert,
            )
            return server.add_secure_port(address, tls)
        except RuntimeError:
            return 0

    # ---- raw sockets (the PS's socket channel: star/rpc/socket_channel.py) -----------
    def ssl_server_context(self) -> ssl.SSLContext | None:
        """TLS for a socket this process serves, with the certificate its gRPC ports use (None: no TLS)."""
        if self.cert_pem is None:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        _load_chain(context, self.cert_pem, self.key_pem)
        if self.require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cadata=(self.ca_pem or b"").decode())
        return context

    def ssl_client_context(self) -> ssl.SSLContext | None:
        """TLS for a socket this process opens, checking the server as its gRPC channels do (None: no TLS)."""
        if not self.client_tls:
            return None
        context = ssl.create_default_context(cadata=self.ca_pem.decode() if self.ca_pem else None)
        if self.cert_pem is not None:
            _load_chain(context, self.cert_pem, self.key_pem)
        return context

    def server_interceptors(self, aio: bool) -> list:
        """The token check for a grpc.aio server (`aio=True`) or a sync grpc.server; none without a token."""
        if self.token is None:
            _warn_unauthenticated_once("server")
            return []
        return [_AioTokenCheck(self.token) if aio else _SyncTokenCheck(self.token)]


# ---------------------------------------------------------------- client interceptor


class _CallDetails(
    collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")),
    grpc.ClientCallDetails,
):
    pass


class _AttachToken(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    def __init__(self, token: str):
        self._pair = (TOKEN_METADATA_KEY, token)

    def _details(self, d: grpc.ClientCallDetails) -> _CallDetails:
        metadata = [m for m in (d.metadata or ()) if m[0] != TOKEN_METADATA_KEY] + [self._pair]
        return _CallDetails(d.method, d.timeout, metadata, d.credentials, d.wait_for_ready, d.compression)

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)


# ---------------------------------------------------------------- server interceptors


def token_problem(expected: str, metadata: Sequence[tuple[str, object]] | None) -> str | None:
    """Why a call's metadata does not authenticate it, or None. Constant-time comparison."""
    given = [value for key, value in (metadata or ()) if key == TOKEN_METADATA_KEY]
    if not given:
        return f"missing job token: send it as metadata {TOKEN_METADATA_KEY!r} (the launcher passes it to its children in {TOKEN_ENV})"
    if len(given) > 1:
        return f"metadata {TOKEN_METADATA_KEY!r} given {len(given)} times; send the job token once"
    value = given[0]
    raw = value if isinstance(value, bytes) else str(value).encode("utf-8", "replace")
    if not hmac.compare_digest(raw, expected.encode()):
        return f"wrong job token in metadata {TOKEN_METADATA_KEY!r}: it does not match this job's token"
    return None


def _refusal(handler: grpc.RpcMethodHandler, deny) -> grpc.RpcMethodHandler:
    """A handler of the same streaming kind as `handler` that runs `deny`; requests stay unparsed bytes."""
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(deny)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny)
    return grpc.unary_unary_rpc_method_handler(deny)


class _SyncTokenCheck(grpc.ServerInterceptor):
    def __init__(self, token: str):
        self._token = token

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        problem = token_problem(self._token, handler_call_details.invocation_metadata)
        if handler is None or problem is None:
            return handler

        def deny(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, problem)

        return _refusal(handler, deny)


class _AioTokenCheck(grpc.aio.ServerInterceptor):
    def __init__(self, token: str):
        self._token = token

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        problem = token_problem(self._token, handler_call_details.invocation_metadata)
        if handler is None or problem is None:
            return handler

        async def deny(request, context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, problem)

        return _refusal(handler, deny)
