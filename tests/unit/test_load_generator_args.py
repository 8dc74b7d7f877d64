"""Load generator options are ints, checked when the generator is built (no Spark needed).

The generators format their options into the SQL they hand Spark, so an option
that is not an int was SQL text, or failed in a tick long after the run began
(``rate = 0`` divided by zero when the generator resumed)."""

from __future__ import annotations

from typing import Any

import pytest

from timeshard.errors import InvalidUsage
from timeshard.spec import RunSpec, build_source, check_spec
from timeshard.storage.sources import AuctionGenerator, CounterGenerator, KeyValueGenerator

BAD = [
    (AuctionGenerator, "users", "50), 1) AS x FROM range(1) --"),
    (AuctionGenerator, "users", 0),
    (AuctionGenerator, "organizations", -1),
    (AuctionGenerator, "rate", 2.5),
    (AuctionGenerator, "seed", "1"),
    (AuctionGenerator, "seed", 2**63),
    (CounterGenerator, "rate", "abc"),
    (CounterGenerator, "rate", 0),
    (CounterGenerator, "max_cardinality", "3"),
    (CounterGenerator, "max_cardinality", True),
    (KeyValueGenerator, "seed", "1)--"),
    (KeyValueGenerator, "seed", 1.5),
    (KeyValueGenerator, "keys", True),
    (KeyValueGenerator, "ticks", -1),
]


@pytest.mark.parametrize(("cls", "option", "value"), BAD)
def test_an_option_that_is_not_a_fitting_int_is_invalid_usage_naming_it(
    cls: Any, option: str, value: Any
) -> None:
    with pytest.raises(InvalidUsage, match=option) as e:
        cls(**{option: value})
    assert repr(value) in str(e.value)


@pytest.mark.parametrize(("cls", "option", "value"), [b for b in BAD if b[1] != "ticks"])
def test_check_spec_refuses_them_before_spark(cls: Any, option: str, value: Any) -> None:
    kind = {AuctionGenerator: "auction", CounterGenerator: "counter"}.get(cls, "key_value")
    spec = RunSpec.model_validate(
        {"source": [{"name": "g", "kind": kind, "options": {option: value}}]}
    )
    with pytest.raises(InvalidUsage, match=option):
        check_spec(spec, existing=[])
    with pytest.raises(InvalidUsage, match=option):
        build_source(spec.source[0])


def test_the_defaults_and_ints_in_range_are_accepted() -> None:
    AuctionGenerator(users=1, organizations=1, rate=1, seed=-(2**63))
    CounterGenerator(rate=1, max_cardinality=1)
    KeyValueGenerator(seed=2**63 - 1)


@pytest.mark.parametrize(
    ("cls", "options", "named"),
    [
        # A partition owning no key divided by zero in every read (REMAINDER_BY_ZERO).
        (KeyValueGenerator, {"keys": 1}, ("keys 1", "partitions 2")),
        (KeyValueGenerator, {"keys": 3, "partitions": 4}, ("keys 3", "partitions 4")),
        # Options the generators' SQL cannot hold: every read overflowed.
        (KeyValueGenerator, {"keys": 2**64}, ("keys", str(2**64))),
        (KeyValueGenerator, {"keys": 2**63}, ("keys", str(2**63))),
        (KeyValueGenerator, {"value_size": 2**31}, ("value_size", str(2**31))),
        (KeyValueGenerator, {"rate": 2**62}, ("rate", str(2**62))),
        (CounterGenerator, {"rate": 2**62}, ("rate", str(2**62))),
        (CounterGenerator, {"max_cardinality": 2**63}, ("max_cardinality", str(2**63))),
        (AuctionGenerator, {"rate": 2**40}, ("rate", str(2**40))),
        (AuctionGenerator, {"users": 2**63}, ("users", str(2**63))),
        (CounterGenerator, {"rate": 2**31 - 1, "ticks": 2**33}, ("ticks", str(2**33))),
    ],
)
def test_options_the_generated_sql_cannot_hold_are_refused_naming_them(
    cls: Any, options: dict[str, Any], named: tuple[str, ...]
) -> None:
    with pytest.raises(InvalidUsage) as e:
        cls(**options)
    for text in named:
        assert text in str(e.value)
    kind = {AuctionGenerator: "auction", CounterGenerator: "counter"}.get(cls, "key_value")
    spec = RunSpec.model_validate({"source": [{"name": "g", "kind": kind, "options": options}]})
    with pytest.raises(InvalidUsage, match=named[0]):
        check_spec(spec, existing=[])


def test_the_largest_options_are_accepted() -> None:
    KeyValueGenerator(keys=1, partitions=1)
    KeyValueGenerator(keys=2**63 - 1, partitions=2, value_size=2**30, rate=2**31 - 1)
    CounterGenerator(rate=2**31 - 1, max_cardinality=2**63 - 1, ticks=(2**63 - 1) // (2**31 - 1))
    AuctionGenerator(rate=2**31 - 1, users=2**63 - 1, organizations=2**63 - 1)
