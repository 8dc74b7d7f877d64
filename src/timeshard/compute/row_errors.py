"""Per-row query errors: a view's SQL rewritten so that a row the query fails on is an err row.

Under ANSI mode Spark fails a whole query when one expression fails on one
row: a division by zero, a cast of a value that does not fit, an arithmetic
overflow. The view would then have one coarse err row for all its content at
that time. Materialize instead makes an err row *of the row that failed*, with
that row's multiplicity, and keeps every other row. This module rewrites the
view's SQL to do the same, as one more output column, :data:`ERRORS`:

* each failing operator in a row-level expression is evaluated in its
  non-failing form -- ``/`` as ``try_divide``, ``%`` as ``try_mod``, ``DIV``
  as a ``CASE`` null where it fails, ``+``,
  ``-`` and ``*`` as ``try_add``, ``try_subtract`` and ``try_multiply``,
  ``CAST`` as ``TRY_CAST`` -- and *flagged* where that form is null while its
  operands are not (exactly where the operator would have failed);
* ``ERRORS`` holds the message of the first flagged operator of the row (in
  the order Spark evaluates them: WHERE, then the select list), or null;
* a WHERE (or HAVING) keeps a row its condition fails on, so that the row
  reaches the output as an err row.

The view turns every output row whose ``ERRORS`` is set into an err row with
the row's multiplicity (``SparkViewDesired.snapshot`` on the full path,
``SparkDelta._consolidated`` on the incremental one): retracting the input
row retracts the error. The rewritten query is the view's query for both the
incremental and the full path, so both give the same err rows.

What Spark evaluates lazily stays lazy: an operator in a branch of ``CASE``,
``IF`` or ``COALESCE``, or right of an ``AND`` or ``OR``, is flagged only where
that branch is evaluated (its guard). A guarded division such as ``CASE WHEN
v = 0 THEN 0 ELSE 12 / v END`` is then never an error.

In a query that aggregates, a group's ``sum(x)`` is evaluated as ``try_sum(x)``
and flagged where that is null while ``count(x) > 0``: a sum that overflows
is an err row of its group's output row (every other group stays), not a
failure of the whole query.

Not rewritten (an error there still fails the query, and the sink falls back
to the coarse err row of the time, :func:`timeshard.compute.view.is_data_error`):
subqueries (and an expression of no row, such as a subquery minus 2), lambda
bodies, window specifications, ``IN`` lists, simple
``CASE x WHEN``, ``NVL2`` and ``DECODE``, functions that fail on their own
(``element_at``, date parsing) and unary minus; and in a query that
aggregates, every operator over the group's rows rather than over aggregates
alone (WHERE, GROUP BY keys, aggregate arguments: an error there belongs to
the group's rows, not to one output row).

Messages name the operator's SQL text and, for a cast, the value: they are a
function of the data, never of the time, so every replica writes the same.

Driver only (parsing); the rewritten SQL runs in the view's Spark jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The output column of the rewritten query that holds a row's error, or null.
ERRORS = "__err"

#: Functions Spark evaluates lazily (not every argument), by name where sqlglot leaves them
#: anonymous: not rewritten inside. Node types sqlglot parses them into: :func:`_lazy_types`.
_LAZY_FUNCTIONS = frozenset({"decode", "nvl2"})


@dataclass
class _Flags:
    """The flagged operators of one SELECT, in evaluation order: (condition, message)."""

    found: list[tuple[Any, Any]] = field(default_factory=list)
    arithmetic: bool = True


def with_row_errors(sql: str, *, arithmetic: bool = True) -> str | None:
    """``sql`` with the :data:`ERRORS` column, or None when nothing in it can fail per row.

    ``arithmetic=False`` rewrites divisions and casts only (for a query whose
    ``+``, ``-`` or ``*`` the ``try_`` forms do not type alike, e.g. over
    strings).
    """
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    try:
        parsed = sqlglot.parse(sql, dialect="spark")
    except SqlglotError:
        return None
    if len(parsed) != 1 or parsed[0] is None:
        return None
    tree = parsed[0]
    selects = _output_selects(tree)
    if not selects:
        return None
    flagged = 0
    for select in selects:
        if any(e.alias_or_name == ERRORS for e in select.expressions):
            return None  # the view has a column of our name: leave it alone
        flags = _Flags(arithmetic=arithmetic)
        _rewrite_select(select, flags)
        flagged += len(flags.found)
        select.append("expressions", exp.alias_(_message(flags), ERRORS))
    if flagged == 0:
        return None
    return tree.sql(dialect="spark")


def _output_selects(tree: Any) -> list[Any]:
    """The SELECTs whose rows are the view's rows: the query, or each branch of a UNION."""
    from sqlglot import exp

    if isinstance(tree, exp.Select):
        return [tree]
    if isinstance(tree, exp.Union):
        left, right = _output_selects(tree.this), _output_selects(tree.expression)
        return left + right if left and right else []
    if isinstance(tree, exp.Subquery):
        return _output_selects(tree.this)
    return []


def _aggregates(select: Any) -> bool:
    """Whether ``select`` aggregates (GROUP BY, HAVING, or an aggregate outside a window)."""
    from sqlglot import exp

    if select.args.get("group") is not None or select.args.get("having") is not None:
        return True
    return any(
        not isinstance(agg.find_ancestor(exp.Window, exp.Select), exp.Window)
        for projection in select.expressions
        for agg in projection.find_all(exp.AggFunc)
    )


def _rewrite_select(select: Any, flags: _Flags) -> None:
    from sqlglot import exp

    grouped = _aggregates(select)
    if not grouped:
        where = select.args.get("where")
        if where is not None:
            select.set("where", exp.Where(this=_kept(where.this, flags, grouped)))
    else:
        having = select.args.get("having")
        if having is not None:
            select.set("having", exp.Having(this=_kept(having.this, flags, grouped)))
    for i, projection in enumerate(list(select.expressions)):
        if isinstance(projection, exp.Star):
            continue
        if isinstance(projection, exp.Alias):
            projection.set("this", _rewrite(projection.this, [], flags, grouped))
        else:  # an unnamed expression: the view's columns are named by the original query
            select.expressions[i] = _rewrite(projection, [], flags, grouped)
            select.expressions[i].parent = select


def _kept(condition: Any, flags: _Flags, grouped: bool) -> Any:
    """A WHERE or HAVING condition that also keeps each row it fails on."""
    from sqlglot import exp

    before = len(flags.found)
    rewritten = _rewrite(condition, [], flags, grouped)
    failed = [c for c, _m in flags.found[before:]]
    if not failed:
        return rewritten
    return exp.or_(exp.paren(rewritten), *[exp.paren(c) for c in failed])


def _message(flags: _Flags) -> Any:
    from sqlglot import exp

    if not flags.found:
        return exp.cast(exp.null(), "STRING")
    case = exp.Case()
    for condition, message in flags.found:
        case = case.when(condition, message)
    return case


def _rewrite(node: Any, guard: list[Any], flags: _Flags, grouped: bool) -> Any:
    """``node`` with its failing operators in their ``try_`` forms, each flagged (with its
    guard: the conditions under which Spark evaluates it) into ``flags``."""
    from sqlglot import exp

    def again(child: Any, more: list[Any] | None = None) -> Any:
        return _rewrite(child, guard + (more or []), flags, grouped)

    if flags.arithmetic and _checked_sum(node):
        return _try_sum(node, flags)
    # Left as it is (a copy: the rewritten tree shares no node with the view's).
    if isinstance(
        node, (exp.Subquery, exp.Select, exp.Lambda, exp.Window, exp.AggFunc, exp.Column)
    ):
        return node.copy()
    if isinstance(node, exp.Literal | exp.Null | exp.Boolean | exp.Star):
        return node.copy()
    if node.find(exp.Subquery) is not None and all(
        c.find_ancestor(exp.Subquery) is not None for c in node.find_all(exp.Column)
    ):
        # Of no row (`(SELECT max(v) FROM a) - 2`): its failure fails the query, as it does
        # in Spark, and the subquery stays where it was (the incremental path needs it
        # there, not copied into the errors column).
        return node.copy()
    if (isinstance(node, exp.Anonymous) and node.name.lower() in _LAZY_FUNCTIONS) or any(
        isinstance(node, t) for t in _lazy_types()
    ):
        return node.copy()
    if isinstance(node, exp.Case):
        if node.this is not None:
            return node.copy()  # CASE x WHEN ...: its comparisons are Spark's, not guarded
        return _rewrite_case(node, guard, flags, grouped)
    if isinstance(node, exp.If):
        condition = again(node.this)
        holds = _is_true(condition)
        true = again(node.args["true"], [holds])
        false = node.args.get("false")
        new = exp.If(this=condition, true=true)
        if false is not None:
            new.set("false", again(false, [exp.not_(holds.copy())]))
        return new
    if isinstance(node, exp.Coalesce):
        first = again(node.this)
        rest, nulls = [], [exp.Is(this=first.copy(), expression=exp.null())]
        for arg in node.expressions:
            rest.append(again(arg, [n.copy() for n in nulls]))
            nulls.append(exp.Is(this=rest[-1].copy(), expression=exp.null()))
        return exp.Coalesce(this=first, expressions=rest)
    if isinstance(node, exp.And | exp.Or):
        left = again(node.this)
        if isinstance(node, exp.And):
            evaluated = exp.not_(exp.Is(this=exp.paren(left.copy()), expression=exp.false()))
        else:
            evaluated = exp.not_(_is_true(left))
        right = again(node.expression, [evaluated])
        return type(node)(this=left, expression=right)
    if isinstance(node, exp.In):
        tested = node.copy()
        tested.set("this", again(node.this))
        return tested
    if grouped and _over_rows(node):
        # An expression of the group's rows (a group key): as it is, but for what it holds
        # over aggregates alone (`k + sum(v) / count(*)`).
        pass
    elif isinstance(node, exp.Cast) and not node.args.get("safe"):
        value = again(node.this)
        to = node.args["to"]
        tried: Any = exp.TryCast(this=value, to=to.copy(), safe=True)
        text = node.sql(dialect="spark")
        message: Any = exp.func(
            "concat",
            exp.Literal.string("cannot cast '"),
            exp.func(
                "coalesce",
                exp.cast(value.copy(), "STRING"),
                exp.Literal.string("?"),
            ),
            exp.Literal.string(f"' to {to.sql(dialect='spark')} in {text}"),
        )
        _flag(flags, guard, tried, [value], message)
        return tried
    elif isinstance(node, exp.Div | exp.Mod):
        left, right = again(node.this), again(node.expression)
        name = "try_divide" if isinstance(node, exp.Div) else "try_mod"
        tried = exp.func(name, left, right)
        text = node.sql(dialect="spark")
        message = exp.If(
            this=exp.EQ(this=exp.paren(right.copy()), expression=exp.Literal.number(0)),
            true=exp.Literal.string(f"division by zero in {text}"),
            false=exp.Literal.string(f"arithmetic overflow in {text}"),
        )
        _flag(flags, guard, tried, [left, right], message)
        return tried
    elif flags.arithmetic and isinstance(node, exp.IntDiv):
        # ``DIV`` has no try_ form: null where the divisor is 0, and where the quotient is
        # past BIGINT (its minimum DIV -1). (Of decimals Spark wraps that quotient instead,
        # and flags it here too: only the one value.) Not in the attempt without the
        # arithmetic operators: an interval's DIV cannot be compared with 0.
        left, right = again(node.this), again(node.expression)
        minimum = exp.Neg(this=exp.Literal.number(2**63))
        overflow = exp.and_(
            _equals(right, -1), exp.EQ(this=exp.paren(left.copy()), expression=minimum)
        )
        tried = exp.Case(
            ifs=[
                exp.If(this=_equals(right, 0), true=exp.null()),
                exp.If(this=overflow, true=exp.null()),
            ],
            default=exp.IntDiv(this=left.copy(), expression=right.copy()),
        )
        text = node.sql(dialect="spark")
        message = exp.If(
            this=_equals(right, 0),
            true=exp.Literal.string(f"division by zero in {text}"),
            false=exp.Literal.string(f"arithmetic overflow in {text}"),
        )
        _flag(flags, guard, tried, [left, right], message)
        return tried
    elif flags.arithmetic and isinstance(node, exp.Add | exp.Sub | exp.Mul):
        left, right = again(node.this), again(node.expression)
        name = {exp.Add: "try_add", exp.Sub: "try_subtract", exp.Mul: "try_multiply"}[type(node)]
        tried = exp.func(name, left, right)
        message = exp.Literal.string(f"arithmetic overflow in {node.sql(dialect='spark')}")
        _flag(flags, guard, tried, [left, right], message)
        return tried
    # Any other expression evaluates all its arguments: rewrite each.
    new = node.copy()
    for key, value in node.args.items():
        if isinstance(value, exp.Expression):
            new.set(key, again(value))
        elif isinstance(value, list):
            new.set(key, [again(v) if isinstance(v, exp.Expression) else v for v in value])
    return new


def _equals(value: Any, number: int) -> Any:
    """SQL: ``(value) = number``."""
    from sqlglot import exp

    literal = exp.Literal.number(abs(number))
    return exp.EQ(
        this=exp.paren(value.copy()), expression=literal if number >= 0 else exp.Neg(this=literal)
    )


def _checked_sum(node: Any) -> bool:
    """Whether ``node`` is a group's ``sum(x)`` whose overflow :func:`_try_sum` flags: not
    DISTINCT, not FILTERed, not a window's (a window is left as it is before its sum)."""
    from sqlglot import exp

    return (
        isinstance(node, exp.Sum)
        and not node.expressions
        and not isinstance(node.this, exp.Distinct)
        and not isinstance(node.parent, exp.Filter)
    )


def _try_sum(node: Any, flags: _Flags) -> Any:
    """``sum(x)`` as ``try_sum(x)``, flagged where it is null while the group has a non-null
    ``x`` (where ``sum`` would have overflowed): an err row of the group's output row.

    Not guarded: Spark computes every aggregate of every group, whichever branch of a
    ``CASE`` reads it. Spark's sum (and try_sum) adds the rows in its order, so a group
    whose total fits but some partial sum does not may fail too; the per-group state of
    the incremental path sums exactly (:mod:`timeshard.compute.aggregate`).
    """
    from sqlglot import exp

    argument = node.this
    tried = exp.func("try_sum", argument.copy())
    counted = exp.GT(this=exp.Count(this=argument.copy()), expression=exp.Literal.number(0))
    failed = exp.and_(exp.Is(this=tried.copy(), expression=exp.null()), counted)
    message = exp.Literal.string(f"arithmetic overflow in {node.sql(dialect='spark')}")
    flags.found.append((failed, message))
    return tried


def _lazy_types() -> list[type]:
    """sqlglot's node types of functions Spark evaluates lazily (besides CASE, IF, COALESCE)."""
    from sqlglot import exp

    names = ("Nvl2", "DecodeCase")  # (exp.Decode is the charset decode: strict)
    return [t for t in (getattr(exp, n, None) for n in names) if isinstance(t, type)]


def _rewrite_case(node: Any, guard: list[Any], flags: _Flags, grouped: bool) -> Any:
    from sqlglot import exp

    missed: list[Any] = []  # every earlier condition: not true
    new = exp.Case()
    for branch in node.args.get("ifs") or []:
        condition = _rewrite(branch.this, guard + missed, flags, grouped)
        holds = _is_true(condition)
        value = _rewrite(branch.args["true"], [*guard, *missed, holds], flags, grouped)
        new = new.when(condition, value)
        missed = [*missed, exp.not_(holds.copy())]
    default = node.args.get("default")
    if default is not None:
        new = new.else_(_rewrite(default, guard + missed, flags, grouped))
    return new


def _is_true(condition: Any) -> Any:
    from sqlglot import exp

    return exp.Is(this=exp.paren(condition.copy()), expression=exp.true())


def _over_rows(node: Any) -> bool:
    """Whether ``node`` reads a column outside an aggregate (in a query that aggregates:
    an expression of the group's rows, not of its output row)."""
    from sqlglot import exp

    for column in node.find_all(exp.Column):
        if column.find_ancestor(exp.AggFunc, exp.Window) is None:
            return True
    return isinstance(node, exp.Window) or node.find(exp.Window) is not None


def _flag(flags: _Flags, guard: list[Any], tried: Any, operands: list[Any], message: Any) -> None:
    """Record ``tried`` as failed where it is null, its operands are not, and ``guard`` holds."""
    from sqlglot import exp

    conditions: list[Any] = [exp.Is(this=tried.copy(), expression=exp.null())]
    conditions += [
        exp.not_(exp.Is(this=o.copy(), expression=exp.null()))
        for o in operands
        if not isinstance(o, exp.Literal)
    ]
    conditions += [g.copy() for g in guard]
    flags.found.append((exp.and_(*conditions), message))
