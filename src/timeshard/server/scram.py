"""The server side of SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL speaks it.

``scramp`` derives the stored keys from the password (PBKDF2, salt and
iteration count); this module checks a client's proof against them. It is
not scramp's own server because PostgreSQL clients (libpq, hence psql and
psycopg) send an empty user name in the SCRAM messages -- the server takes
the user from the start-up message -- and scramp refuses empty attributes.
Channel binding is not offered (the server speaks no TLS): a client that
demands it (``p=``) is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

MECHANISM = "SCRAM-SHA-256"


class ScramFailure(Exception):
    """The exchange failed: a malformed message, or a wrong password."""


@dataclass(frozen=True)
class ScramKeys:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @staticmethod
    def from_password(password: str) -> ScramKeys:
        from scramp import ScramMechanism

        salt, stored_key, server_key, iterations = ScramMechanism(MECHANISM).make_auth_info(
            password
        )
        return ScramKeys(salt, stored_key, server_key, iterations)


class ScramExchange:
    """One client's exchange: :meth:`first`, then :meth:`final`."""

    def __init__(self, keys: ScramKeys) -> None:
        self.keys = keys
        self._bare = self._server_first = self._nonce = self._gs2 = ""

    def first(self, client_first: str) -> str:
        """The server-first message answering ``client_first``."""
        gs2, sep, bare = _split_gs2(client_first)
        if not sep or not gs2 or gs2[0] not in "ny":
            raise ScramFailure("channel binding is not supported: connect without it")
        attrs = _attributes(bare)
        if not attrs.get("r"):
            raise ScramFailure("the client's first message has no nonce")
        self._gs2, self._bare = gs2, bare
        self._nonce = attrs["r"] + base64.b64encode(secrets.token_bytes(18)).decode()
        salt = base64.b64encode(self.keys.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self.keys.iterations}"
        return self._server_first

    def final(self, client_final: str) -> str:
        """The server-final message; ScramFailure unless the client's proof is right."""
        without_proof, sep, proof_text = client_final.rpartition(",p=")
        if not sep or not self._nonce:
            raise ScramFailure("the client's final message has no proof")
        attrs = _attributes(without_proof)
        if attrs.get("r") != self._nonce:
            raise ScramFailure("the client's final message has the wrong nonce")
        if _b64(attrs.get("c", "")) != self._gs2.encode():
            raise ScramFailure("the client's final message has the wrong channel binding")
        auth = f"{self._bare},{self._server_first},{without_proof}".encode()
        signature = hmac.new(self.keys.stored_key, auth, hashlib.sha256).digest()
        proof = _b64(proof_text)
        if len(proof) != len(signature):
            raise ScramFailure("the client's proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), self.keys.stored_key):
            raise ScramFailure("wrong password")
        server = hmac.new(self.keys.server_key, auth, hashlib.sha256).digest()
        return "v=" + base64.b64encode(server).decode()


def _split_gs2(client_first: str) -> tuple[str, bool, str]:
    """``("n,,", True, bare)``: the GS2 header (through its second comma) and the rest."""
    first = client_first.find(",")
    second = client_first.find(",", first + 1) if first >= 0 else -1
    if second < 0:
        return "", False, ""
    return client_first[: second + 1], True, client_first[second + 1 :]


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if sep and len(key) == 1:
            out.setdefault(key, value)
    return out


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError as e:
        raise ScramFailure(f"not base64: {text[:40]!r}") from e


__all__ = ["MECHANISM", "ScramExchange", "ScramFailure", "ScramKeys"]
