"""The control channel between a decode worker and a prefill worker's bootstrap server: framed
JSON messages over a TCP socket, opened by mutual HMAC authentication with the worker key.

Frame: 4-byte big-endian length, then that many bytes of UTF-8 JSON (a dict with "op").
Authentication: the server sends a random nonce; the client answers HMAC-SHA256(key, "decode" |
server nonce | client nonce) with its own nonce; the server proves itself back with
HMAC-SHA256(key, "prefill" | client nonce | server nonce). Neither side sends anything else
before the other has proven it holds the key, and no key ever crosses the wire."""

from __future__ import annotations

import hmac
import json
import os
import socket
import struct
from typing import Any

from .layout import HandshakeError, TransferError

PROTOCOL_VERSION = 1
_MAX_MESSAGE = 1 << 20
_LEN = struct.Struct(">I")


def send_msg(sock: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message, separators=(",", ":")).encode()
    sock.sendall(_LEN.pack(len(data)) + data)


def recv_exact(sock: socket.socket, view: memoryview) -> None:
    """Fills `view` from the socket; TransferError when the peer closes first."""
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise TransferError(f"the peer closed the connection after {got} of {len(view)} bytes")
        got += n


def recv_msg(sock: socket.socket) -> dict[str, Any]:
    head = bytearray(4)
    recv_exact(sock, memoryview(head))
    (size,) = _LEN.unpack(head)
    if size > _MAX_MESSAGE:
        raise TransferError(f"control message of {size} bytes exceeds {_MAX_MESSAGE}: not a radixgate peer")
    body = bytearray(size)
    recv_exact(sock, memoryview(body))
    message = json.loads(body)
    if not isinstance(message, dict) or "op" not in message:
        raise TransferError("malformed control message")
    if message["op"] == "error":
        cls = HandshakeError if message.get("kind") == "handshake" else TransferError
        raise cls(f"the peer refused: {message.get('message')}")
    return message


def expect(sock: socket.socket, op: str) -> dict[str, Any]:
    message = recv_msg(sock)
    if message["op"] != op:
        raise TransferError(f"expected {op!r} from the peer, got {message['op']!r}")
    return message


def _mac(key: bytes, role: str, first: str, second: str) -> str:
    return hmac.new(key, f"{role}|{first}|{second}".encode(), "sha256").hexdigest()


def authenticate_as_server(sock: socket.socket, key: bytes) -> None:
    nonce = os.urandom(16).hex()
    send_msg(sock, {"op": "hello", "version": PROTOCOL_VERSION, "nonce": nonce})
    reply = expect(sock, "auth")
    client_nonce = str(reply.get("nonce", ""))
    if len(client_nonce) != 32 or not hmac.compare_digest(
        str(reply.get("mac", "")), _mac(key, "decode", nonce, client_nonce)
    ):
        send_msg(sock, {"op": "error", "kind": "handshake", "message": "authentication failed: the worker keys differ"})
        raise HandshakeError("a decode worker failed authentication (wrong worker key)")
    send_msg(sock, {"op": "auth_ok", "mac": _mac(key, "prefill", client_nonce, nonce)})


def authenticate_as_client(sock: socket.socket, key: bytes) -> None:
    hello = expect(sock, "hello")
    if hello.get("version") != PROTOCOL_VERSION:
        raise HandshakeError(f"protocol version {hello.get('version')} on the prefill worker, {PROTOCOL_VERSION} here")
    nonce, server_nonce = os.urandom(16).hex(), str(hello.get("nonce", ""))
    send_msg(sock, {"op": "auth", "nonce": nonce, "mac": _mac(key, "decode", server_nonce, nonce)})
    try:
        ok = expect(sock, "auth_ok")
    except TransferError as e:
        raise HandshakeError(str(e)) from e
    if not hmac.compare_digest(str(ok.get("mac", "")), _mac(key, "prefill", nonce, server_nonce)):
        raise HandshakeError("the prefill worker failed to prove the worker key")
