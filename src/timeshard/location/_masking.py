"""Masking the secrets of location URIs before they reach a message or a log.

A URI a user typed may be malformed in any way (``postgresql//app:pw@h/db``,
an unencoded ``/`` or ``@`` in the password) and still carry a secret, so
masking never parses: it rewrites the text.

Invariants:

1. The password of a ``user:password@`` (after ``://`` or not) is replaced by
   ``***``; when it follows ``scheme://user:``, everything up to the last
   ``@`` of the line that no quote precedes goes, so an unencoded ``/``, ``@``
   or space in it hides nothing. The user stays.
2. The value of a ``key=value`` parameter whose key names a secret (``password``,
   ``sslpassword``, ``secret_key``, ``session_token``, ...) is replaced by
   ``***``, quoted values whole.
3. Masking masked text changes nothing.
4. :func:`secrets` returns exactly the texts :func:`masked` replaces, so that a
   caller can refuse to show a value parsed out of a URI (a port, a host) that
   is part of a secret: a malformed URI may make a parser read part of its
   password as another field.
"""

from __future__ import annotations

import re

_AFTER_SCHEME = re.compile(r"(://[^\s/:@]*):([^\n\r'\"]*)@")
_USERINFO = re.compile(r"([^\s/:@]*):([^\s/]*)@")
_SECRET_PARAM = re.compile(
    r"(\b\w*(?:password|passwd|secret|token)\w*\s*=\s*)('(?:[^'\\]|\\.)*'?|[^&\s]*)",
    re.IGNORECASE,
)


def masked(text: str) -> str:
    """``text`` with every password and secret parameter of a URI in it replaced by ``***``.

    >>> masked("postgresql://app:pw@db/ts?sslpassword=x&sslmode=require")
    'postgresql://app:***@db/ts?sslpassword=***&sslmode=require'
    >>> masked("host=db password='a b' dbname=ts")
    'host=db password=*** dbname=ts'
    """
    text = _AFTER_SCHEME.sub(r"\1:***@", text)
    text = _USERINFO.sub(r"\1:***@", text)
    return _SECRET_PARAM.sub(r"\1***", text)


def hidden(text: str, source: str) -> str:
    """``text`` masked, and every secret of ``source`` in it replaced by ``***``: for a
    parser's message about ``source``, which may quote a secret out of context."""
    for secret in sorted(secrets(source), key=len, reverse=True):
        # Not inside a word: a short secret ("a", "5432") would garble the message.
        text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", "***", text)
    return masked(text)


def secrets(text: str) -> list[str]:
    """The non-empty texts :func:`masked` replaces by ``***`` in ``text``.

    >>> secrets("postgresql://app:pa/ss@db/ts?sslpassword=x")
    ['pa/ss', 'x']
    """
    found = [m.group(2) for m in _AFTER_SCHEME.finditer(text)]
    text = _AFTER_SCHEME.sub(r"\1:***@", text)
    found += [m.group(2) for m in _USERINFO.finditer(text) if m.group(2) != "***"]
    text = _USERINFO.sub(r"\1:***@", text)
    found += [m.group(2) for m in _SECRET_PARAM.finditer(text) if m.group(2) != "***"]
    return [secret for secret in found if secret]


__all__ = ["hidden", "masked", "secrets"]
