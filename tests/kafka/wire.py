"""A bare Kafka wire client for tests: frames requests with kafka-python's schemas, reads
one response at a time, and can misbehave (oversized frames, half exchanges, silence).
It authenticates with scramp's SCRAM client or PLAIN, so a test sees every step."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from typing import Any

import scramp
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse


class Closed(Exception):
    """The server closed the connection."""


class RawClient:
    def __init__(self, port: int, host: str = "127.0.0.1", *, tls: ssl.SSLContext | None = None, source: str | None = None, timeout: float = 10.0) -> None:
        sock = socket.create_connection((host, port), timeout=timeout, source_address=(source, 0) if source else None)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname="localhost")
        self.sock = sock
        self.corr = 0

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, request: Any, version: int) -> int:
        self.corr += 1
        request.with_header(correlation_id=self.corr, client_id="raw-test")
        self.sock.sendall(request.encode(version=version, header=True, framed=True))
        return self.corr

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except (ConnectionResetError, ssl.SSLError) as exc:
                raise Closed(str(exc)) from None
            if not chunk:
                raise Closed(f"connection closed after {len(out)} of {n} bytes")
            out += chunk
        return out

    def recv(self, response_class: Any, version: int) -> Any:
        (size,) = struct.unpack(">i", self._read(4))
        data = self._read(size)
        return response_class.decode(data, version=version, header=True)

    def call(self, request: Any, version: int, response_class: Any) -> Any:
        self.send(request, version)
        return self.recv(response_class, version)

    def closed_within(self, seconds: float) -> bool:
        """Whether the server closes the connection within ``seconds`` (reading nothing)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if self.sock.recv(1 << 16) == b"":
                    return True
            except socket.timeout:
                return False
            except (ConnectionResetError, ssl.SSLError, OSError):
                return True
        return False

    # -- the SASL steps ----------------------------------------------------------------------
    def api_versions(self) -> Any:
        return self.call(ApiVersionsRequest(client_software_name="raw", client_software_version="1"), 3, ApiVersionsResponse)

    def handshake(self, mechanism: str) -> Any:
        return self.call(SaslHandshakeRequest(mechanism=mechanism), 1, SaslHandshakeResponse)

    def authenticate_token(self, token: bytes, version: int = 2) -> Any:
        return self.call(SaslAuthenticateRequest(auth_bytes=token), version, SaslAuthenticateResponse)

    def login(self, mechanism: str, user: str, password: str, version: int = 2) -> Any:
        """Handshake and authenticate; returns the last SaslAuthenticate response."""
        hs = self.handshake(mechanism)
        if hs.error_code:
            return hs
        if mechanism == "PLAIN":
            return self.authenticate_token(f"\0{user}\0{password}".encode(), version)
        client = scramp.ScramClient([mechanism], user, password)
        first = self.authenticate_token(client.get_client_first().encode(), version)
        if first.error_code:
            return first
        client.set_server_first(bytes(first.auth_bytes).decode())
        final = self.authenticate_token(client.get_client_final().encode(), version)
        if final.error_code == 0:
            client.set_server_final(bytes(final.auth_bytes).decode())
        return final

    def metadata(self, topics: list[str] | None = None, version: int = 8, auto_create: bool = False) -> Any:
        req = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=auto_create,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        return self.call(req, version, MetadataResponse)
