"""Which tables a MySQL DDL statement of the binlog replaces, empties or takes away.

A MYSQL source reads rows from row events, but ``TRUNCATE``, ``DROP TABLE``,
``DROP DATABASE``, ``RENAME TABLE``, ``ALTER TABLE ... RENAME``, ``ALTER TABLE
... TRUNCATE|DROP|EXCHANGE|CONVERT PARTITION``, ``ALTER TABLE ... CONVERT TABLE``
and ``CREATE OR REPLACE TABLE`` change a table's contents (or its name) with a
query event and no rows; so may each of them behind MariaDB's ``SET STATEMENT
... FOR`` (binlogged as typed), which is skipped.
:func:`ddl_tables` names the tables such a statement touches, so that the
source can emit an err row for each of its own. So does any ``ALTER TABLE``
not known to keep every existing value (:func:`_keeps_values`: columns added
at the end, index, key, constraint and partition maintenance): a column
dropped and added again, two columns swapped by ``RENAME COLUMN`` or a
``varchar`` made ``char`` change values with no row event, and the table map
of the next row event need not show it.

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
#: An ``ALTER TABLE`` that may change existing values (a column dropped and added again,
#: columns swapped by ``RENAME COLUMN``, ``MODIFY`` to a shorter or padded type): the
#: table map of later row events need not show it, and no row event carries the change.
ALTERED = "altered"
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
        ignore = c.accept("IGNORE")  # duplicate rows of a new unique key are deleted
        if c.accept("TABLE"):
            if c.accept("IF"):
                c.accept("EXISTS")
            n = c.name()
            if n is not None:
                out += [(change, *(other or n)) for change, other in _alter_changes(c)]
                if ignore and (ALTERED, *n) not in out:
                    out.append((ALTERED, *n))
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
    """What the ALTER's specifications do to the table's contents (or name), one by one
    (:func:`_spec_changes`); an ``ALTER IGNORE`` (which deletes duplicate rows) alters it."""
    if c.accept("WAIT"):
        c.i += 1  # its seconds
    c.accept("NOWAIT")
    out: list[tuple[str, tuple[str, str] | None]] = []
    while c.peek() is not None:
        begin = c.i
        c.skip_to_comma()
        for change in _spec_changes(_Cursor(c.toks[begin : c.i], c.database)):
            if change not in out:
                out.append(change)
        if _kw(c.toks[begin], *_PARTITION_KEEPING, "REPAIR", "TRUNCATE", "DROP") and _kw(
            c.toks[begin + 1] if begin + 1 < len(c.toks) else None, "PARTITION"
        ):
            break  # a list of partitions follows, and no other specification
        if c.peek() != ",":
            break
        c.i += 1
    return out


def _spec_changes(s: _Cursor) -> list[tuple[str, tuple[str, str] | None]]:
    """What one ALTER specification does: ``RENAME [TO|AS] name`` (not of a column, index
    or key), ``TRUNCATE``/``DROP PARTITION``, ``EXCHANGE PARTITION p WITH TABLE other``
    (which also replaces ``other``, named beside it), ``CONVERT PARTITION p TO TABLE
    other`` (rows moved out to ``other``), ``CONVERT TABLE other TO PARTITION p`` (rows
    moved in from ``other``, which is dropped); any other specification that
    :func:`_keeps_values` does not know to keep every existing value alters it."""
    t, after = s.peek(), s.peek(1)
    if _kw(t, "RENAME") and not _kw(after, "COLUMN", "INDEX", "KEY", "CONSTRAINT"):
        return [(RENAMED, None)]
    if _kw(t, "TRUNCATE", "DROP") and _kw(after, "PARTITION"):
        return [(PARTLY_EMPTIED, None)]
    if _kw(t, "EXCHANGE") and _kw(after, "PARTITION"):
        s.i += 3  # EXCHANGE PARTITION p
        if s.accept("WITH") and s.accept("TABLE") and (other := s.name()) is not None:
            return [(REPLACED, None), (REPLACED, other)]
        return [(REPLACED, None)]
    if _kw(t, "CONVERT") and _kw(after, "PARTITION"):
        s.i += 3  # CONVERT PARTITION p
        if s.accept("TO") and s.accept("TABLE") and (other := s.name()) is not None:
            return [(PARTLY_EMPTIED, None), (REPLACED, other)]
        return [(PARTLY_EMPTIED, None)]
    if _kw(t, "CONVERT") and _kw(after, "TABLE"):
        s.i += 2  # CONVERT TABLE
        if (other := s.name()) is not None:
            return [(REPLACED, None), (REPLACED, other)]
        return [(REPLACED, None)]
    return [] if _keeps_values(s.toks) else [(ALTERED, None)]


def _cascades(spec: list[str]) -> bool:
    """Whether the tokens hold ``ON DELETE|UPDATE CASCADE|SET NULL|SET DEFAULT``."""
    return any(
        _kw(spec[j], "ON")
        and _kw(spec[j + 1], "DELETE", "UPDATE")
        and _kw(spec[j + 2], "CASCADE", "SET")
        for j in range(len(spec) - 2)
    )


#: ``ADD``, ``DROP`` of these: an index or a constraint (``ADD PARTITION``: rows stay).
_KEYS = ("INDEX", "KEY", "UNIQUE", "PRIMARY", "FULLTEXT", "SPATIAL", "FOREIGN", "CONSTRAINT")
#: Partition maintenance that moves no row out of the table.
_PARTITION_KEEPING = ("REORGANIZE", "COALESCE", "ANALYZE", "CHECK", "OPTIMIZE", "REBUILD")


def _keeps_values(spec: list[str]) -> bool:
    """Whether an ALTER specification surely keeps every existing row and value: a column
    added at the end, an index, key or constraint added, dropped, renamed or ignored, a
    column's default set or dropped, partition maintenance, a rebuild in InnoDB, a comment.
    Anything else (a foreign key that cascades, ``MODIFY``, ``CHANGE``, ``DROP [COLUMN]``,
    ``RENAME COLUMN``, ``FIRST``, ``AFTER``, ``CONVERT TO``, another engine, what this
    parser does not know) may change values without row events: conservatively, it does
    not."""
    if not spec:
        return True
    if _cascades(spec):
        return False  # a foreign key whose actions on the child are not binlogged
    first, second = spec[0], spec[1] if len(spec) > 1 else None
    if _kw(first, "ADD"):
        if _kw(second, *_KEYS, "CHECK", "PARTITION"):
            return True
        if _kw(second, "SYSTEM", "PERIOD"):
            return False
        rest = spec[2:] if _kw(second, "COLUMN") else spec[1:]
        if len(rest) > 3 and _kw(rest[0], "IF") and _kw(rest[1], "NOT"):
            rest = rest[3:]  # IF NOT EXISTS
        definition = rest if rest[:1] == ["("] else rest[1:]  # past the column's name
        return bool(rest) and not any(_kw(w, "FIRST", "AFTER") for w in definition)
    if _kw(first, "DROP"):
        return _kw(second, *_KEYS, "CHECK")
    if _kw(first, "RENAME"):
        return _kw(second, "INDEX", "KEY", "CONSTRAINT")
    if _kw(first, "ALTER"):
        if _kw(second, "INDEX", "KEY"):
            return True
        rest = spec[2:] if _kw(second, "COLUMN") else spec[1:]
        return len(rest) >= 3 and _kw(rest[1], "SET", "DROP") and _kw(rest[2], "DEFAULT")
    if _kw(first, "ENGINE"):
        return _kw(spec[-1], "INNODB") and len(spec) <= 3
    if _kw(first, "ENABLE", "DISABLE"):
        return _kw(second, "KEYS")
    if _kw(first, *_PARTITION_KEEPING, "REPAIR"):
        return _kw(second, "PARTITION")
    return (
        _kw(first, "ALGORITHM", "LOCK", "FORCE", "COMMENT", "AUTO_INCREMENT")
        or (_kw(first, "REMOVE") and _kw(second, "PARTITIONING"))
        or (_kw(first, "PARTITION") and _kw(second, "BY"))
    )


__all__ = [
    "ALTERED",
    "DROPPED",
    "EVERY_TABLE",
    "PARTLY_EMPTIED",
    "RENAMED",
    "REPLACED",
    "TRUNCATED",
    "ddl_tables",
    "tokens",
]
