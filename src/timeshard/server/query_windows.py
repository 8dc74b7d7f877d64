"""The rewrites of a client's query's window functions where Spark answers them otherwise
than PostgreSQL 15: a rank's type, and a ranking or offset window of no order.

Each takes the sqlglot tree of the query and changes it in place;
:func:`~timeshard.server.query_rewrites._numeric_casts` runs them, gated on the version
of the typing rewrites each came with.

Pure Python, no Spark.
"""

from __future__ import annotations

from sqlglot import exp

from timeshard.server.statements import SqlError

#: The window functions PostgreSQL answers as an int8 and Spark as an INT (int4).
_RANKS = (exp.RowNumber, exp.Rank, exp.DenseRank)

#: The window functions Spark runs only over an ordered window, and PostgreSQL over any.
_ORDERED = (*_RANKS, exp.PercentRank, exp.CumeDist, exp.Ntile, exp.Lag, exp.Lead)


def _bigint_ranks(tree: exp.Expr) -> None:
    """A window of ``row_number``, ``rank`` or ``dense_rank`` is cast to BIGINT: PostgreSQL
    answers them as int8 (20), Spark as INT, which a client was told was an int4 (23),
    and a sum or product of them stayed an INT where PostgreSQL's is an int8. One that is
    an operand of an integer quotient (:func:`~timeshard.server.query_rewrites.
    _integer_quotients`, run before this) stays as it is: the quotient is cast to BIGINT
    already."""
    for window in list(tree.find_all(exp.Window)):
        if not isinstance(window.this, _RANKS) or isinstance(window.parent, exp.IntDiv):
            continue
        cast = exp.Cast(this=exp.Null(), to=exp.DataType.build("BIGINT"))
        window.replace(cast)  # moved, not copied, as the rewrites before it move theirs
        cast.set("this", window)


def _ordered_windows(tree: exp.Expr, named: bool = False) -> None:
    """A window of :data:`_ORDERED` of no ``ORDER BY`` (``row_number() OVER ()``,
    ``rank() OVER (PARTITION BY p)``) is ordered ``BY NULL``: PostgreSQL numbers such a
    window's rows in an order of its own and ranks them all alike (every row a peer),
    where Spark refused it (XX000, "requires window to be ordered"). Ordered by NULL,
    every row is a peer and Spark numbers them in its order, as PostgreSQL does in its.

    With ``named`` (the typing rewrites' version 4), a named window of no order (``OVER
    w ... WINDOW w AS (PARTITION BY p)``) is that too: the use is written out as its
    definition (:func:`_named_definition`: its partition and order) ordered by NULL,
    since Spark's window of a name takes no ORDER BY of its own; a use's own ORDER BY
    (``OVER (w ORDER BY i)``, which Spark cannot parse) is its order, and one that would
    override the name's ORDER BY, or that has a PARTITION BY, is PostgreSQL's 42P20. The
    ``WINDOW`` clause stays as it is, for the other uses of the name. And a frame
    (``ROWS BETWEEN ...``) of such a function's window, its own or its name's, is
    dropped: PostgreSQL ignores it for these functions, where Spark refused any but the
    one it requires. Without ``named`` (version 3) a named window is left to Spark, and
    a frame kept."""
    for window in list(tree.find_all(exp.Window)):
        if not isinstance(window.this, _ORDERED):
            if named:
                _copied_window(window)
            continue
        name = window.args.get("alias")
        if name is not None:
            definition = _named_definition(window, name.name) if named else None
            if definition is None:
                continue  # not known here: Spark's
            partition, order, spec = definition
            own = window.args.get("order")  # OVER (w ORDER BY ...): PostgreSQL's, not Spark's
            # PostgreSQL refuses these, in this order (a copy takes the name's partition).
            overridden = "PARTITION BY" if window.args.get("partition_by") else None
            overridden = overridden or ("ORDER BY" if own and order else None)
            if overridden:
                raise SqlError(
                    f'cannot override {overridden} clause of window "{name.name}"', "42P20"
                )
            if own is None and order is not None and spec is None:
                continue  # ordered and of no frame where it is defined: Spark answers it
            window.set("alias", None)
            window.set("partition_by", [p.copy() for p in partition])
            if own is None:
                window.set("order", order.copy() if order is not None else None)
        if named:
            window.set("spec", None)
        if not window.args.get("order"):
            window.set("order", exp.Order(expressions=[exp.Ordered(this=exp.Null())]))


def _copied_window(window: exp.Window) -> None:
    """A window of any other function that copies a named window and orders it or frames
    it (``sum(i) OVER (w ORDER BY k)``, which PostgreSQL answers and Spark cannot parse)
    is written out: the name's partition, its own order (or the name's) and its own
    frame. As PostgreSQL refuses them (42P20): a PARTITION BY of its own, an ORDER BY
    over a name's, and a copy of a name with a frame."""
    name = window.args.get("alias")
    own, frame = window.args.get("order"), window.args.get("spec")
    if window.arg_key == "windows":  # a definition of the WINDOW clause (w2 AS (w ...))
        return
    if name is None or not (own or frame or window.args.get("partition_by")):
        return  # OVER w, or OVER (w): Spark's as it is
    definition = _named_definition(window, name.name)
    if definition is None:
        return  # not known here: Spark's
    partition, order, spec = definition
    if window.args.get("partition_by"):
        overridden = "cannot override PARTITION BY clause of window"
    elif own and order:
        overridden = "cannot override ORDER BY clause of window"
    elif spec is not None:
        overridden = "cannot copy window"
    else:
        window.set("alias", None)
        window.set("partition_by", [p.copy() for p in partition])
        if own is None:
            window.set("order", order.copy() if order is not None else None)
        return
    suffix = " because it has a frame clause" if overridden == "cannot copy window" else ""
    raise SqlError(f'{overridden} "{name.name}"{suffix}', "42P20")


def _named_definition(
    window: exp.Window, name: str
) -> tuple[list[exp.Expr], exp.Order | None, exp.Expr | None] | None:
    """The partition, the order and the frame of the window ``name`` that ``window`` (a
    use of it) reads, from the ``WINDOW`` clause of its SELECT, following a definition
    that names another window (``w2 AS (w)``: the named one's partition and order, and
    the frame of whichever of them has one); None if it is not found (a name defined
    twice, or in a cycle)."""
    select = window.find_ancestor(exp.Select)
    definitions: dict[str, list[exp.Window]] = {}
    for defined in (select.args.get("windows") or []) if select is not None else []:
        definitions.setdefault(defined.name, []).append(defined)
    partition: list[exp.Expr] = []
    order = None
    spec = None
    seen = set()
    while name not in seen:
        seen.add(name)
        found = definitions.get(name, [])
        if len(found) != 1:
            return None
        partition = partition or list(found[0].args.get("partition_by") or [])
        order = order or found[0].args.get("order")
        spec = spec or found[0].args.get("spec")
        base = found[0].args.get("alias")
        if base is None:
            return partition, order, spec
        name = base.name
    return None
