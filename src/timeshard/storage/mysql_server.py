"""Where a MYSQL source's server is, and how a session connects to it.

:class:`Server` holds plain values (host, port, user, password, database,
connect timeout) parsed from the source's ``mysql://`` URL
(:meth:`Server.from_url`, the password from ``MYSQL_PWD`` when the URL has
none); :meth:`Server.connect` opens a pymysql session in UTC
(:data:`SESSION_INIT`) and :meth:`Server.stream_settings` are the binlog
reader's. :func:`quote` quotes a table or column name, refusing one no MySQL
name is; :func:`redact` hides a URL's password in messages; :func:`_text`
is a value the server sent as bytes or as text, as text.

What runs where: the driver parses the URL when it builds the source
(:class:`~timeshard.storage.mysql_source.MySqlSource`) and connects for its
checks, ``upper`` and ``read``'s planning; the :class:`Server` travels in the
read plan to the Spark task (:mod:`~timeshard.storage.mysql_read`), which
connects with it. The password is never in its ``repr``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from timeshard.errors import InvalidUsage, SourceUnavailable

_IDENT = re.compile(r"[^\x00]{1,64}")
#: The longest ``connect_timeout_s`` (pymysql's bound: a year).
MAX_CONNECT_TIMEOUT_S = 31_536_000
#: Settings every session of the source uses (timestamps print in UTC).
SESSION_INIT = "SET time_zone = '+00:00'"


def quote(identifier: str) -> str:
    """A table or column name in backticks, a backtick in it doubled (an empty name, one
    longer than 64 characters or holding NUL, which no MySQL name is, is refused)."""
    if not isinstance(identifier, str) or not _IDENT.fullmatch(identifier):
        raise InvalidUsage(f"not a MySQL identifier this source reads: {identifier!r}")
    return "`" + identifier.replace("`", "``") + "`"


def redact(url: object) -> object:
    """A URL with its password shown as ``***`` (anything else unchanged)."""
    if not isinstance(url, str):
        return url
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<an unparsable url>"
    if password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{user}:***@{host}").geturl()


def _env_password() -> str:
    """The password of ``MYSQL_PWD`` (read on the driver; tasks get the Server's), or ""."""
    return os.environ.get("MYSQL_PWD", "")


@dataclass(frozen=True)
class Server:
    """Where the server is: plain values a Spark task can connect with."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str
    connect_timeout_s: int = 10

    @classmethod
    def from_url(cls, url: str, connect_timeout_s: int = 10) -> Server:
        """``mysql://user[:password]@host:port/database``.

        A URL without a password takes it from ``MYSQL_PWD``, as MySQL's own
        clients do (a catalog keeps the URL, so an SQL statement's URL should
        hold none); with neither, the account is one without a password.
        """
        if (
            isinstance(connect_timeout_s, bool)
            or not isinstance(connect_timeout_s, int)
            or not 0 < connect_timeout_s <= MAX_CONNECT_TIMEOUT_S
        ):
            raise InvalidUsage(
                "MYSQL connect_timeout_s must be a whole number of seconds in "
                f"[1, {MAX_CONNECT_TIMEOUT_S}], got {connect_timeout_s!r}"
            )
        try:
            parts = urlsplit(url) if isinstance(url, str) else None
            port = None if parts is None else parts.port
        except ValueError as e:  # a port that is no number or above 65535, a bad IPv6 host
            raise InvalidUsage(f"url {redact(url)!r} is not a MySQL URL: {e}") from None
        if parts is None or parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
            raise InvalidUsage(
                f"url must be mysql://user:password@host:port/database, got {redact(url)!r}"
            )
        if port == 0:
            raise InvalidUsage(f"url {redact(url)!r} has port 0, which no server listens on")
        if parts.query or parts.fragment or url.endswith(("?", "#")):
            raise InvalidUsage(
                f"url {redact(url)!r} has a query string or fragment, which the MYSQL source "
                "does not read (nothing after the database is an option)"
            )
        database = unquote(parts.path.lstrip("/"))
        if not database:
            raise InvalidUsage(f"url {redact(url)!r} names no database")
        quote(database)
        return cls(
            parts.hostname,
            port or 3306,
            unquote(parts.username or "root"),
            unquote(parts.password) if parts.password is not None else _env_password(),
            database,
            connect_timeout_s,
        )

    def connect(self, *, text_only: bool = False) -> Any:
        """A pymysql connection (autocommit, UTC); unreachable: ``SourceUnavailable``."""
        import pymysql
        from pymysql.converters import conversions

        # Text only: the encoders (Python types) stay, the decoders (field type codes) go.
        encoders_only = {k: v for k, v in conversions.items() if not isinstance(k, int)}
        try:
            return pymysql.connect(
                host=self.host,
                port=self.port,
                user=self.user,
                password=self.password,
                database=self.database,
                autocommit=True,
                charset="utf8mb4",
                connect_timeout=self.connect_timeout_s,
                init_command=SESSION_INIT,
                **({"conv": encoders_only} if text_only else {}),
            )
        except pymysql.err.OperationalError as e:
            raise SourceUnavailable(
                f"MySQL server {self.host}:{self.port} is unreachable: {e}"
            ) from None

    def stream_settings(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "connect_timeout": self.connect_timeout_s,
        }


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


__all__ = ["MAX_CONNECT_TIMEOUT_S", "SESSION_INIT", "Server", "quote", "redact"]
