"""What Spark's analysed plan of a view tells the incremental path (``LogicalPlan.toJSON``).

:func:`order_dependent`: why a query's result may depend on the order of
its input rows (the grouped class then takes the full path);
:func:`rewritten_expressions`: what sqlglot's SQL of a query computes that
the query does not (the incremental terms are written by sqlglot).

Runs on the driver, over plans Spark analysed there (no job).
"""

from __future__ import annotations

from typing import Any

#: Aggregates whose result is a function of the multiset of their input rows (Spark's
#: class names): a touched group recomputed gives the row that was written.
_ORDERLESS_AGGREGATES = frozenset(
    {
        "Count",
        "CountIf",
        "HyperLogLogPlusPlus",
        "Sum",
        "TrySum",
        "Average",
        "TryAverage",
        "Min",
        "Max",
        "Median",
        "BitAndAgg",
        "BitOrAgg",
        "BitXorAgg",
        "BoolAnd",
        "BoolOr",
    }
)
#: ... and of those, the ones whose result is one of their values or a count: no rounding
#: (the rest, over floating point values, round in the order of their terms).
_EXACT = frozenset({"Count", "CountIf", "HyperLogLogPlusPlus", "Min", "Max"})
#: ... and of those, the ones that sum in double whatever their argument's type (Spark's
#: Average): exact, so as a function of the multiset, only for the argument types below
#: (INT and narrower, below 2**22 rows a group; decimals and intervals sum exactly).
_DOUBLE_SUMS = frozenset({"Average", "TryAverage"})
_EXACT_IN_DOUBLE = ("integer", "short", "byte", "decimal", "interval")
#: Window functions that give tied rows the same value.
_TIE_FREE_WINDOWS = frozenset({"Rank", "DenseRank", "PercentRank", "CumeDist"})


def order_dependent(analysed: str) -> str | None:
    """Why a query's result may depend on the order of its input rows, or None: from
    Spark's analysed plan as JSON (``LogicalPlan.toJSON``), subqueries included.

    The grouped class recomputes a touched key's rows at ``lower - 1`` and
    retracts them: that is the row written earlier only if the query gives the
    same rows for the same multiset in any order. Not so for aggregates that
    keep an order (collect_list, first, max_by with ties, ...), for floating
    point sums, averages and moments (their rounding follows the order of the
    terms), for averages of BIGINT (Spark sums them in double, which rounds
    past 2**53), and for window functions that tell tied rows apart
    (row_number, lag, a ROWS frame).
    """
    import json

    found: list[str] = []

    def end(nodes: list[Any], i: int) -> int:
        j = i + 1
        for _ in range(int(nodes[i].get("num-children", 0))):
            j = end(nodes, j)
        return j

    def name(node: Any) -> str:
        return str(node.get("class", "")).rsplit(".", 1)[-1]

    def floats(nodes: list[Any]) -> bool:
        return any(n.get("dataType") in ("double", "float") for n in nodes)

    def exact_in_double(argument: list[Any]) -> bool:
        """Whether an argument's values sum exactly in double: its type if its root
        names one, else (an operator) every type in it."""
        types = [n["dataType"] for n in argument[:1] if "dataType" in n] or [
            n["dataType"] for n in argument if "dataType" in n
        ]
        return all(str(t).startswith(_EXACT_IN_DOUBLE) for t in types)

    def check(nodes: list[Any]) -> None:
        for i, node in enumerate(nodes):
            kind = name(node)
            if kind == "AggregateExpression" and i + 1 < len(nodes):
                function = name(nodes[i + 1])
                if function not in _ORDERLESS_AGGREGATES:
                    found.append(f"the aggregate {function} depends on the order of its rows")
                elif function not in _EXACT and floats(nodes[i + 1 : end(nodes, i + 1)]):
                    found.append(f"{function} of floating point values depends on their order")
                elif function in _DOUBLE_SUMS and not exact_in_double(
                    nodes[i + 2 : end(nodes, i + 1)]
                ):
                    found.append(
                        f"{function} of a type wider than INT sums in double, whose rounding "
                        "past 2**53 depends on the order of the rows (sum(x) / count(x) does not)"
                    )
            elif kind == "WindowExpression" and i + 1 < len(nodes):
                function = name(nodes[i + 1])
                if function != "AggregateExpression":
                    if function not in _TIE_FREE_WINDOWS:
                        found.append(f"the window function {function} tells tied rows apart")
                    continue
                window = nodes[i : end(nodes, i)]
                for j, frame in enumerate(window):  # an aggregate over a ROWS frame
                    if name(frame) == "SpecifiedWindowFrame" and "RowFrame" in json.dumps(
                        frame.get("frameType")
                    ):
                        bounds = [name(n) for n in window[j + 1 : end(window, j)]]
                        if bounds != ["UnboundedPreceding$", "UnboundedFollowing$"]:
                            found.append("a ROWS window frame tells tied rows apart")

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            for v in value.values():
                visit(v)
        elif isinstance(value, list):
            if value and all(isinstance(v, dict) and "num-children" in v for v in value):
                check(value)
            for v in value:
                visit(v)

    visit(json.loads(analysed))
    return "; ".join(dict.fromkeys(found)) or None


#: Plan nodes and expressions sqlglot's qualified SQL adds or renames without changing what
#: the query computes (table aliases, column aliases and qualifiers).
_NAMING = frozenset({"AttributeReference", "Alias", "SubqueryAlias", "Project"})


def rewritten_expressions(analysed: str, qualified: str) -> str | None:
    """What Spark's analysed plan of sqlglot's SQL of a query (``qualified``) holds that
    its plan of the query itself (``analysed``) does not, or the other way round; None if
    nothing but names. Both are ``LogicalPlan.toJSON``.

    The incremental terms are written by sqlglot, the full path runs the query: where
    sqlglot writes a function as another (``log10(x)`` as ``LOG(10, x)``, which rounds
    otherwise) or drops an argument (``to_char``'s format), the two paths disagree.
    """
    import json
    from collections import Counter

    def classes(plan: str) -> Counter[str]:
        out: Counter[str] = Counter()

        def visit(value: Any) -> None:
            if isinstance(value, dict):
                kind = str(value.get("class", "")).rsplit(".", 1)[-1]
                if kind and kind not in _NAMING:
                    out[kind] += 1
                for v in value.values():
                    visit(v)
            elif isinstance(value, list):
                for v in value:
                    visit(v)

        visit(json.loads(plan))
        return out

    mine, theirs = classes(analysed), classes(qualified)
    lost, gained = sorted(mine - theirs), sorted(theirs - mine)
    if not lost and not gained:
        return None
    return (
        "sqlglot writes the query with other expressions "
        f"({', '.join(lost) or 'nothing'} became {', '.join(gained) or 'nothing'})"
    )


__all__ = [
    "order_dependent",
    "rewritten_expressions",
]
