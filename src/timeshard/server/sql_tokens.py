"""The tokens of a statement ``timeshard serve`` reads, and a reader over them.

The tokens come from sqlglot's PostgreSQL tokenizer (as
:mod:`timeshard.server.dialect` reads ``$n``): strings, quoted
identifiers and comments are its business. :class:`TokenReader` is the
token-level half of the hand-written parser: it reads the words, names,
values and option lists that the statements of
:mod:`timeshard.server.statements` and :mod:`timeshard.server.ddl` are made
of, one token after another, and says where a statement goes wrong with a
:class:`SqlError`.

Names are PostgreSQL identifiers: bare ones fold to lower case, double-quoted
ones keep their case and may hold dots (``"auction.bids"``); a dotted bare
name (``auction.bids``) names the same shard. An option list is
``(name words [=] value, ...)``; an option's name is its words, lower-cased
and joined by ``_``.

Pure Python, no Spark.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from sqlglot import Token, TokenType
from sqlglot.errors import SqlglotError

from timeshard.errors import InvalidUsage
from timeshard.server.dialect import DIALECT


class _Tokenizer(DIALECT.tokenizer_class):  # type: ignore[name-defined,misc]
    COMMANDS: ClassVar[set[TokenType]] = set()  # SHOW, EXPLAIN, ...: words, not one opaque string


class SqlError(InvalidUsage):
    """A statement the server refuses, with its SQLSTATE (PostgreSQL's error codes)."""

    def __init__(self, message: str, sqlstate: str = "42601") -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


#: PostgreSQL 15's text of an integer: a sign and decimal digits, whitespace around them.
_INTEGER_TEXT = re.compile(r"\s*([+-]?[0-9]+)\s*", re.ASCII)


def integer_input_error(text: str, name: str, bits: int) -> SqlError | None:
    """PostgreSQL 15's error for ``text`` read as an integer of type ``name`` (``bits``
    wide): 22P02 (invalid input syntax) if it is no integer, 22003 if past the type's
    range; None if PostgreSQL reads it. (PostgreSQL 16 reads ``0x10`` and ``1_000`` too;
    15, and Spark, do not.)"""
    digits = _INTEGER_TEXT.fullmatch(text)
    if digits is None:
        return SqlError(f'invalid input syntax for type {name}: "{text}"', "22P02")
    sign, number = digits[1][:1] if digits[1][:1] in "+-" else "", digits[1].lstrip("+-")
    number = number.lstrip("0") or "0"  # at most 20 digits for int(): Python reads 4,300
    if len(number) > 20 or not -(2 ** (bits - 1)) <= int(sign + number) < 2 ** (bits - 1):
        return SqlError(f'value "{text}" is out of range for type {name}', "22003")
    return None


def tokenize(sql: str) -> list[Token]:
    """``sql``'s tokens; a :class:`SqlError` if it cannot be read (an unclosed string)."""
    try:
        return list(_Tokenizer(dialect=DIALECT).tokenize(sql))
    except SqlglotError as e:
        raise SqlError(f"cannot read the statement: {str(e).splitlines()[0]}") from None


class TokenReader:
    """A statement's tokens and the position ``i`` of the next one to read.

    The readers take what they expect and move past it, or raise a
    :class:`SqlError` that says where the statement went wrong; ``accept``
    and ``punct`` take their tokens only if they are there, and say whether.
    """

    def __init__(self, sql: str, tokens: list[Token]) -> None:
        self.sql = sql
        self.tokens = tokens
        self.i = 0

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def word(self, ahead: int = 0) -> str | None:
        """The upper-cased text of a bare word ahead (keyword or name), or None."""
        t = self.peek(ahead)
        if t is None or t.token_type in (TokenType.STRING, TokenType.IDENTIFIER):
            return None
        if not (t.text[:1].isalpha() or t.text[:1] == "_"):
            return None
        return t.text.upper()

    def accept(self, *words: str) -> bool:
        if all(self.word(k) == w for k, w in enumerate(words)):
            self.i += len(words)
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise self.error(f"expected {' '.join(words)}")

    def error(self, message: str) -> SqlError:
        t = self.peek()
        where = f"at {t.text!r}" if t is not None else "at the end of the statement"
        return SqlError(f"syntax error {where}: {message}")

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def end(self) -> None:
        if not self.at_end():
            raise self.error("unexpected text after the statement")

    def rest(self) -> str:
        t = self.peek()
        return "" if t is None else self.sql[t.start :].strip()

    def name(self) -> str:
        """An object name: identifiers joined by dots; bare parts fold to lower case."""
        parts = [self.ident()]
        while (t := self.peek()) is not None and t.token_type == TokenType.DOT:
            self.i += 1
            parts.append(self.ident())
        return ".".join(parts)

    def ident(self) -> str:
        t = self.peek()
        if t is None:
            raise self.error("expected a name")
        if t.token_type == TokenType.IDENTIFIER:
            self.i += 1
            return t.text
        bare = t.token_type not in (TokenType.STRING, TokenType.NUMBER)
        if not (bare and (t.text[:1].isalpha() or t.text[:1] == "_")):
            raise self.error("expected a name")
        self.i += 1
        return t.text.lower()

    def value(self) -> Any:
        """A literal: a string, a number (``-`` before it too), TRUE or FALSE, a word, or
        a cast of a literal that a bound parameter is (``CAST(5 AS BIGINT)``, see
        :func:`~timeshard.server.statements.bind`), as the value of its type."""
        if self.at_cast():
            return self.cast()
        t = self.peek()
        if t is None:
            raise self.error("expected a value")
        self.i += 1
        if t.token_type == TokenType.STRING:
            return t.text
        if t.token_type == TokenType.DASH:
            v = self.value()
            if not isinstance(v, int | float) or isinstance(v, bool):
                raise self.error("expected a number after '-'")
            return -v
        if t.token_type == TokenType.NUMBER:
            return int(t.text) if t.text.isdigit() else float(t.text)
        if t.text.upper() in ("TRUE", "FALSE"):
            return t.text.upper() == "TRUE"
        if t.token_type == TokenType.IDENTIFIER:
            return t.text
        return t.text.lower()

    def time(self) -> int:
        return self.whole("a time", "milliseconds")

    def whole(self, what: str, unit: str = "") -> int:
        """A whole number: digits, or a bound parameter's cast of them."""
        t = self.peek()
        expected = f"expected {what}: a whole number" + (f" of {unit}" if unit else "")
        if t is None:
            raise self.error(expected)
        if self.at_cast():
            value = self.cast()
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SqlError(f"{what} must be a whole number, got {value!r}", "22023")
            return value
        if t.token_type != TokenType.NUMBER or not t.text.isdigit():
            raise self.error(expected)
        self.i += 1
        return int(t.text)

    def at_number(self, at: int | None = None) -> bool:
        """Whether a number, or a bound parameter's cast, starts at token ``at`` (the
        next one if None)."""
        j = self.i if at is None else at
        t = self.tokens[j] if j < len(self.tokens) else None
        return t is not None and (t.token_type == TokenType.NUMBER or self.at_cast(j))

    def at_cast(self, at: int | None = None) -> bool:
        """Whether ``CAST (`` starts at token ``at`` (the next one if None)."""
        j = self.i if at is None else at
        window = self.tokens[j : j + 2]
        return (
            len(window) == 2
            and window[0].token_type != TokenType.IDENTIFIER
            and window[0].text.upper() == "CAST"
            and window[1].token_type == TokenType.L_PAREN
        )

    def cast(self) -> Any:
        """``CAST(literal AS type)``, as :func:`~timeshard.server.statements.bind` writes
        a typed parameter, read as the value of its type: an integer type's an int, a
        float type's a float (``'NaN'`` too), a DECIMAL's an int or a float as its
        digits read, a NULL None."""
        self.i += 2
        t = self.peek()
        if t is not None and t.token_type == TokenType.NULL:
            self.i += 1
            value: Any = None
        else:
            value = self.value()
        self.expect("AS")
        words = []
        depth = 0
        while (t := self.peek()) is not None and (depth or t.token_type != TokenType.R_PAREN):
            depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(t.token_type, 0)
            words.append(t.text.upper())
            self.i += 1
        self.expect_punct(TokenType.R_PAREN, ")")
        kind = " ".join(words)
        if value is None or isinstance(value, bool):
            return value
        try:
            if kind in ("BIGINT", "INTEGER", "INT", "SMALLINT"):
                return int(value)
            if kind in ("REAL", "DOUBLE PRECISION", "FLOAT"):
                return float(value)
        except (TypeError, ValueError):
            raise SqlError(f"{value!r} is not a value of type {kind}", "22P02") from None
        return value

    def punct(self, kind: TokenType) -> bool:
        t = self.peek()
        if t is not None and t.token_type == kind:
            self.i += 1
            return True
        return False

    def expect_punct(self, kind: TokenType, text: str) -> None:
        if not self.punct(kind):
            raise self.error(f"expected {text!r}")

    def options(self) -> dict[str, Any]:
        """``(name words [=] value, ...)``: names lower-cased, words joined by ``_``."""
        out: dict[str, Any] = {}
        self.expect_punct(TokenType.L_PAREN, "(")
        while True:
            words = []
            while (w := self.word()) is not None and self.peek(1) is not None:
                nxt = self.peek(1)
                assert nxt is not None
                if nxt.token_type in (TokenType.COMMA, TokenType.R_PAREN):
                    break  # w is the value of a word-valued option
                words.append(w.lower())
                self.i += 1
                if nxt.token_type in (TokenType.STRING, TokenType.NUMBER, TokenType.EQ):
                    break
                if nxt.token_type == TokenType.DASH or self.at_cast():
                    break
            if not words:
                raise self.error("expected an option name")
            self.punct(TokenType.EQ)
            key = "_".join(words)
            if key in out:
                raise SqlError(f"option {key.upper()} is given twice")
            out[key] = self.value()
            if self.punct(TokenType.R_PAREN):
                return out
            self.expect_punct(TokenType.COMMA, ",")

    def name_list(self) -> list[str]:
        self.expect_punct(TokenType.L_PAREN, "(")
        names = [self.ident()]
        while self.punct(TokenType.COMMA):
            names.append(self.ident())
        self.expect_punct(TokenType.R_PAREN, ")")
        return names


__all__ = ["SqlError", "TokenReader", "tokenize"]
