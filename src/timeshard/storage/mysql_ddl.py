"""Which tables a MySQL DDL statement of the binlog replaces, empties or takes away.

A MYSQL source reads rows from row events, but ``TRUNCATE``, ``DROP TABLE``,
``DROP DATABASE``, ``RENAME TABLE``, ``ALTER TABLE ... RENAME``, ``ALTER TABLE
... TRUNCATE|DROP|EXCHANGE|CONVERT PARTITION``, ``ALTER TABLE ... CONVERT TABLE``
and ``CREATE OR REPLACE TABLE`` change a table's contents (or its name) with a
query event and no rows; so may each of them behind MariaDB's ``SET STATEMENT
... FOR`` (binlogged as typed), which is skipped.
:func:`ddl_tables` names the tables such a statement touches, so that the
source can emit an err row for each of its own. (A change of columns needs
no parsing: the table map of the next row event shows it.)

The statement is tokenised, not matched with one pattern: identifiers may be
backquoted (holding spaces, dots or doubled backquotes), qualified by a
database (else the event's default one applies) and surrounded by comments.
Executable comments (``/*! ... */``, ``/*M! ... */``) are read as the server
reads them: their text is part of the statement.

Pure functions; they run in the read task.
"""

from __future__ import annotations

import re

#: One token: a backquoted or double-quoted name, a string, a word, or a punctuation mark.
_TOKEN = re.compile(
    r"""
      (?P<ws>\s+)
    | (?P<comment>/\*(?![M]?!).*?\*/|(?:--[ \t]|\#)[^\n]*)
    | (?P<exec_open>/\*M?!\d*)
    | (?P<exec_close>\*/)
    | (?P<bq>`(?:[^`]|``)*`)
    | (?P<dq>"(?:[^"\\]|\\.|"")*")
    | (?P<sq>'(?:[^'\\]|\\.|'')*')
    | (?P<word>[A-Za-z0-9_$\u0080-\uffff]+)
    | (?P<punct>.)
    """,
    re.X | re.S,
)

#: What a statement does to the tables it names, by its leading keywords.
TRUNCATED, DROPPED, RENAMED, REPLACED = "truncated", "dropped", "renamed", "replaced"
#: ``ALTER TABLE ... TRUNCATE PARTITION`` and ``DROP PARTITION``: rows gone, no row events.
PARTLY_EMPTIED = "partly emptied"
#: The table name of ``DROP DATABASE``: every table of the database (no table is named "").
EVERY_TABLE = ""


class _Name(str):
    """A quoted identifier: never a keyword."""


def tokens(sql: str) -> list[str]:
    """The statement's tokens: keywords upper-cased, names unquoted (as :class:`_Name`)."""
    out: list[str] = []
    for m in _TOKEN.finditer(sql):
        kind, text = m.lastgroup, m.group()
        if kind in ("ws", "comment", "exec_open", "exec_close"):
            continue
        if kind == "bq":
            out.append(_Name(text[1:-1].replace("``", "`")))
        elif kind == "dq":
            out.append(_Name(text[1:-1].replace('""', '"')))
        elif kind == "sq":
            out.append("'")  # a string: never a name here
        elif kind == "word":
            out.append(text)
        else:
            out.append(text)
    return out


def _kw(token: str | None, *words: str) -> bool:
    return token is not None and not isinstance(token, _Name) and token.upper() in words


class _Cursor:
    def __init__(self, toks: list[str], database: str) -> None:
        self.toks, self.i, self.database = toks, 0, database

    def peek(self, ahead: int = 0) -> str | None:
        j = self.i + ahead
        return self.toks[j] if j < len(self.toks) else None

    def accept(self, *words: str) -> bool:
        if _kw(self.peek(), *words):
            self.i += 1
            return True
        return False

    def name(self) -> tuple[str, str] | None:
        """``[db.]table`` at the cursor (db defaulting to the statement's), or None."""
        first = self.peek()
        if first is None or (not isinstance(first, _Name) and not _is_word(first)):
            return None
        self.i += 1
        if self.peek() == "." and self.peek(1) is not None and _is_name(self.peek(1)):
            second = self.peek(1)
            assert second is not None
            self.i += 2
            return (str(first), str(second))
        return (self.database, str(first))

    def skip_to_comma(self) -> None:
        """Past the rest of one list item (parentheses balanced); stops at a top-level comma."""
        depth = 0
        while (t := self.peek()) is not None:
            if not isinstance(t, _Name):
                if t == "(":
                    depth += 1
                elif t == ")":
                    depth -= 1
                elif t in (",", ";") and depth <= 0:
                    return
            self.i += 1


def _is_word(token: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9_$\u0080-\uffff]+", token))


def _is_name(token: str | None) -> bool:
    return token is not None and (isinstance(token, _Name) or _is_word(token))


def ddl_tables(sql: str, database: str) -> list[tuple[str, str, str]]:
    """``(change, db, table)`` for each table the statement truncates, drops, renames or replaces.

    ``database`` is the event's default database (for unqualified names).
    Any other statement gives ``[]``.

    >>> ddl_tables("TRUNCATE TABLE `my t`", "d")
    [('truncated', 'd', 'my t')]
    >>> ddl_tables("/* c */ RENAME TABLE a TO b, x.c TO a", "d")
    [('renamed', 'd', 'a'), ('renamed', 'd', 'b'), ('renamed', 'x', 'c'), ('renamed', 'd', 'a')]
    """
    c = _Cursor(tokens(sql), database)
    out: list[tuple[str, str, str]] = []
    _skip_set_statement(c)
    if c.accept("TRUNCATE"):
        c.accept("TABLE")
        if (n := c.name()) is not None:
            out.append((TRUNCATED, *n))
    elif c.accept("DROP"):
        if c.accept("TABLE", "TABLES"):  # not DROP TEMPORARY TABLE: base tables stay
            if c.accept("IF"):
                c.accept("EXISTS")
            out += [(DROPPED, *n) for n in _name_list(c)]
        elif c.accept("DATABASE", "SCHEMA"):
            if c.accept("IF"):
                c.accept("EXISTS")
            if _is_name(c.peek()):
                out.append((DROPPED, str(c.peek()), EVERY_TABLE))
    elif c.accept("RENAME"):
        if c.accept("TABLE", "TABLES"):
            while True:
                for _ in range(2):  # old TO new: both change contents
                    if (n := c.name()) is None:
                        return out
                    out.append((RENAMED, *n))
                    if c.accept("WAIT"):
                        c.i += 1
                    c.accept("NOWAIT")
                    c.accept("TO")
                if not c.accept(","):
                    break
    elif c.accept("ALTER"):
        c.accept("ONLINE")
        c.accept("IGNORE")
        if c.accept("TABLE"):
            if c.accept("IF"):
                c.accept("EXISTS")
            n = c.name()
            if n is not None:
                out += [(change, *(other or n)) for change, other in _alter_changes(c)]
    elif c.accept("CREATE") and c.accept("OR") and c.accept("REPLACE") and c.accept("TABLE"):
        out += [(REPLACED, *n) for n in [c.name()] if n is not None]
    return out


def _skip_set_statement(c: _Cursor) -> None:
    """Past MariaDB's ``SET STATEMENT var = value [, ...] FOR`` (binlogged as typed)."""
    if not (_kw(c.peek(), "SET") and _kw(c.peek(1), "STATEMENT")):
        return
    depth = 0
    for j in range(c.i + 2, len(c.toks)):
        t = c.toks[j]
        if not isinstance(t, _Name):
            depth += (t == "(") - (t == ")")
            if depth == 0 and _kw(t, "FOR"):
                c.i = j + 1
                return


def _name_list(c: _Cursor) -> list[tuple[str, str]]:
    names = []
    while (n := c.name()) is not None:
        names.append(n)
        if not c.accept(","):
            break
    return names


def _alter_changes(c: _Cursor) -> list[tuple[str, tuple[str, str] | None]]:
    """What the ALTER's specifications do to the table's contents (or name): ``RENAME
    [TO|AS] name`` (not of a column), ``TRUNCATE``/``DROP PARTITION``, ``EXCHANGE
    PARTITION p WITH TABLE other`` (which also replaces ``other``, named beside it),
    ``CONVERT PARTITION p TO TABLE other`` (rows moved out to ``other``) and ``CONVERT
    TABLE other TO PARTITION p`` (rows moved in from ``other``, which is dropped)."""
    if c.accept("WAIT"):
        c.i += 1  # its seconds
    c.accept("NOWAIT")
    out: list[tuple[str, tuple[str, str] | None]] = []
    while (t := c.peek()) is not None:
        after = c.peek(1)
        if _kw(t, "RENAME") and not _kw(after, "COLUMN", "INDEX", "KEY", "CONSTRAINT"):
            out.append((RENAMED, None))
        elif _kw(t, "TRUNCATE", "DROP") and _kw(after, "PARTITION"):
            out.append((PARTLY_EMPTIED, None))
        elif _kw(t, "EXCHANGE") and _kw(after, "PARTITION"):
            c.i += 3  # EXCHANGE PARTITION p
            out.append((REPLACED, None))
            if c.accept("WITH") and c.accept("TABLE") and (other := c.name()) is not None:
                out.append((REPLACED, other))
        elif _kw(t, "CONVERT") and _kw(after, "PARTITION"):
            c.i += 3  # CONVERT PARTITION p
            out.append((PARTLY_EMPTIED, None))
            if c.accept("TO") and c.accept("TABLE") and (other := c.name()) is not None:
                out.append((REPLACED, other))
        elif _kw(t, "CONVERT") and _kw(after, "TABLE"):
            c.i += 2  # CONVERT TABLE
            out.append((REPLACED, None))
            if (other := c.name()) is not None:
                out.append((REPLACED, other))
        c.skip_to_comma()
        if c.peek() != ",":
            return out
        c.i += 1
    return out


__all__ = [
    "DROPPED",
    "EVERY_TABLE",
    "PARTLY_EMPTIED",
    "RENAMED",
    "REPLACED",
    "TRUNCATED",
    "ddl_tables",
    "tokens",
]
