"""Avro FILE ingestion through spark-avro, in its own process and SparkSession.

Usage: avro_main.py SCRATCH_DIR

The integration tier's shared session has no spark-avro jar, and a process
holds one SparkContext, so ``test_avro.py`` starts this script. It builds a
session with ``spark_session(packages=[spark_avro_package()])`` (Ivy fetches
the jar from Maven Central once, into its default cache, so reruns are
quick), then:

1. writes files of base64 Avro datums (encoded by :func:`encode`, a small
   encoder of the Avro binary spec written here, independent of spark-avro),
   including invalid base64 and corrupt datums;
2. runs an ``Ingestion`` over a ``FileSource`` in format ``avro``, appends
   lines (one half-written, one ending in CRLF) and a new file, restarts,
   steps again, and after every step compares the output shard at every time
   ``since <= t < upper`` with a model: each line, decoded by the test or
   expected as an err row at ``file@offset``, at the first bound time beyond
   its offset;
3. checks that ``read`` is deterministic and keeps ``_partition``/``_offset``;
4. runs ``timeshard run`` on a declaration file with an avro source.

Prints one line ``avro checks passed ...`` on success. If the session with
the spark-avro package cannot start (no network to Maven Central), prints
``cannot start a SparkSession with spark-avro: ...`` and exits with
:data:`NO_JAR`.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import struct
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from typer.testing import CliRunner

from timeshard.cli.main import app
from timeshard.location import Location
from timeshard.persist import PersistClient
from timeshard.spark import spark_session
from timeshard.spark.session import spark_avro_package
from timeshard.storage import REMAP_SCHEMA, Remap
from timeshard.storage.file_source import AVRO_DECODE_ERROR, FileSource, avro_payload_schema
from timeshard.storage.ingest import Ingestion

NO_JAR = 3
FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "score", "type": ["null", "double"]},
    {"name": "n", "type": "int"},
    {"name": "f", "type": ["float", "null"]},
    {"name": "ok", "type": "boolean"},
    {"name": "raw", "type": {"type": "bytes", "doc": "a primitive in object form"}},
]
SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Reading",
    "namespace": "timeshard.test",
    "fields": FIELDS,
}
AVRO = json.dumps(SCHEMA)
NAMES = [f["name"] for f in FIELDS]
AVRO_ERR = f"AvroDecodeError: {AVRO_DECODE_ERROR}"
Row = tuple[tuple[Any, ...], str | None]


def _varint(n: int) -> bytes:
    """Avro's zig-zag variable-length encoding of an int or long."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _encode_value(value: Any, avro_type: Any) -> bytes:
    if isinstance(avro_type, list):
        branch = avro_type.index("null") if value is None else 1 - avro_type.index("null")
        return _varint(branch) + _encode_value(value, avro_type[branch])
    if isinstance(avro_type, dict):
        return _encode_value(value, avro_type["type"])
    if avro_type == "null":
        return b""
    if avro_type == "boolean":
        return b"\x01" if value else b"\x00"
    if avro_type in ("int", "long"):
        return _varint(value)
    if avro_type == "float":
        return struct.pack("<f", value)
    if avro_type == "double":
        return struct.pack("<d", value)
    data: bytes = value.encode() if avro_type == "string" else value
    return _varint(len(data)) + data


def encode(values: tuple[Any, ...]) -> bytes:
    """The Avro binary datum of a ``Reading`` record."""
    return b"".join(_encode_value(v, f["type"]) for v, f in zip(values, FIELDS, strict=True))


def good_values(i: int) -> tuple[Any, ...]:
    """Field values of reading ``i``; ``raw`` holds a newline byte."""
    return (
        i * 1_000_000_007,
        f"reading-{i} é",
        None if i % 2 else i / 4,
        -i,
        None if i % 3 == 0 else i + 0.5,
        i % 2 == 0,
        bytes([i, 0, 10, 255]),
    )


def good(i: int) -> tuple[bytes, Row]:
    values = good_values(i)
    return base64.b64encode(encode(values)), (values, None)


def bad_base64(line: bytes) -> tuple[bytes, Row]:
    try:
        base64.b64decode(line, validate=True)
    except binascii.Error as e:
        return line, ((None,) * len(NAMES), f"ValueError: invalid base64: {e}")
    raise AssertionError(f"{line!r} is valid base64")


def corrupt(datum: bytes) -> tuple[bytes, Row]:
    return base64.b64encode(datum), ((None,) * len(NAMES), AVRO_ERR)


class Model:
    """The lines written, by position, and what each must become."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lines: list[tuple[str, int, Row]] = []

    def append(self, partition: str, lines: list[tuple[bytes, Row]], end: bytes = b"\n") -> None:
        path = self.root / partition
        path.parent.mkdir(parents=True, exist_ok=True)
        offset = path.stat().st_size if path.exists() else 0
        with open(path, "ab") as f:
            for line, row in lines:
                self.lines.append((partition, offset, row))
                f.write(line + end)
                offset += len(line) + len(end)

    def at(self, t: int, bindings: list[tuple[int, dict[str, int]]]) -> Counter[Row]:
        """The rows every line bound at a time ``<= t`` becomes."""
        out: Counter[Row] = Counter()
        for partition, offset, (values, err) in self.lines:
            bound = [bt for bt, f in bindings if f.get(partition, 0) > offset]
            if bound and bound[0] <= t:
                out[(values, f"{partition}@{offset}: {err}" if err else None)] += 1
        return out


def check_all_times(client: PersistClient, ing: Ingestion, model: Model) -> int:
    """Compare the shard at every readable time with the model; the times checked."""
    state = client.state("readings")
    since, upper = state.since.time, state.upper.time
    assert since is not None and upper is not None, (since, upper)
    reader = client.open_leased_reader("readings")
    # Every binding since the start (the ingestion's own Remap forgets those below its since).
    bindings = Remap(client, "readings.remap").bindings()
    try:
        for t in range(since, upper):
            rows = reader.snapshot(t).to_pylist()
            assert all(r["_diff"] == 1 for r in rows), rows
            got = Counter((tuple(r[n] for n in NAMES), r["_err"]) for r in rows)
            want = model.at(t, bindings)
            assert got == want, (t, got - want, want - got)
    finally:
        reader.expire()
    return upper - since


def check_ingestion(spark: Any, scratch: Path) -> tuple[int, int]:
    root = scratch / "in"
    root.mkdir()
    model = Model(root)
    model.append(
        "a.b64",
        [
            good(1),
            good(2),
            bad_base64(b"not base64!!"),
            corrupt(encode(good_values(3))[:-3]),  # truncated inside the last field
            good(4),
            corrupt(encode(good_values(8)) + b"\x02\x00"),  # too long: bytes left over
        ],
    )
    client = PersistClient(Location.embedded(scratch / "loc"))
    hold = client.open_leased_reader("readings", avro_payload_schema(AVRO))
    # The model reclocks every record, so hold every binding: otherwise the remap
    # shard compacts the bindings the output no longer needs.
    _hold_remap = client.open_leased_reader("readings.remap", REMAP_SCHEMA)
    clock = itertools.count(1)

    def ingestion() -> Ingestion:
        source = FileSource("readings", root, "avro", avro_schema=AVRO)
        return Ingestion(spark, client, source, clock=lambda: next(clock))

    ing = ingestion()
    ing.step()
    times = check_all_times(client, ing, model)
    negative_length = _varint(5) + _varint(-3) + b"abc"
    model.append("a.b64", [corrupt(negative_length), good(5), bad_base64(b"QUJ")])
    model.append("a.b64", [good(6)], end=b"\r\n")
    half, half_row = good(7)
    with open(root / "a.b64", "ab") as f:
        f.write(half[:10])
    bad_union = _varint(8) + _varint(1) + b"x" + _varint(7)  # union branch 7 of 2
    model.append("sub/b.b64", [good(10), corrupt(bad_union), good(12)])
    ing = ingestion()  # a restart in between
    ing.step()
    ing.step()
    times += check_all_times(client, ing, model)
    offset = (root / "a.b64").stat().st_size - 10
    with open(root / "a.b64", "ab") as f:
        f.write(half[10:] + b"\n")
    model.lines.append(("a.b64", offset, half_row))
    ing.step()
    times += check_all_times(client, ing, model)
    upper = client.state("readings").upper.time
    assert upper is not None
    final = hold.snapshot(upper - 1).to_pylist()
    assert len(final) == len(model.lines) == 14, (len(final), len(model.lines))
    errs = sorted(r["_err"] for r in final if r["_err"] is not None)
    assert len(errs) == 6 and sum(AVRO_ERR in e for e in errs) == 4, errs
    hold.expire()
    return len(model.lines), times


def check_read(spark: Any, scratch: Path) -> None:
    """``read`` keeps positions, and reading a range twice gives the same rows."""
    source = FileSource("readings", scratch / "in", "avro", avro_schema=AVRO)
    end = source.upper()
    first = source.read(spark, {}, end).collect()
    second = source.read(spark, {}, end).collect()

    def key(row: Any) -> tuple[str, int]:
        return (row["_partition"], row["_offset"])

    assert sorted(first, key=key) == sorted(second, key=key)
    by_position = {key(r): r for r in first}
    assert by_position[("a.b64", 0)]["id"] == good_values(1)[0], by_position[("a.b64", 0)]
    assert by_position[("a.b64", 0)]["_err"] is None
    assert list(first[0].asDict()) == ["_partition", "_offset", *NAMES, "_err"]


def check_all_null_record(spark: Any, scratch: Path) -> None:
    """A datum whose fields are all null is a good row; a corrupt one is an err row."""
    schema = json.dumps(
        {"type": "record", "name": "Opt", "fields": [{"name": "a", "type": ["null", "long"]}]}
    )
    data = scratch / "opt.b64"
    data.write_bytes(b"AA==\nAg==\nBA==\n")  # a = null; a = <missing long>; branch 2 of 2
    source = FileSource("opt", data, "avro", avro_schema=schema)
    rows = sorted(source.read(spark, {}, source.upper()).collect(), key=lambda r: r["_offset"])
    assert [(r["_offset"], r["a"], r["_err"]) for r in rows] == [
        (0, None, None),
        (5, None, f"opt.b64@5: {AVRO_ERR}"),
        (10, None, f"opt.b64@10: {AVRO_ERR}"),
    ], rows


def check_run_command(scratch: Path) -> None:
    """``timeshard run`` with an avro source (columns from the schema); stops Spark."""
    data = scratch / "run-in"
    model = Model(data)
    model.append("r.b64", [good(20), corrupt(b"\x02"), good(21)])
    spec = scratch / "run.toml"
    spec.write_text(
        f'[location]\ndir = "{scratch / "run-loc"}"\n\n'
        f'[[source]]\nname = "readings"\nkind = "file"\n'
        f'options = {{ path = "{data}", format = "avro", avro_schema = \'\'\'\n'
        f"{json.dumps(SCHEMA, indent=2)}''' }}\n"
    )
    out = CliRunner().invoke(app, ["run", str(spec), "--seconds", "2"])
    assert out.exit_code == 0, (out.output, out.exception)
    client = PersistClient(Location.embedded(scratch / "run-loc"))
    upper = client.state("readings").upper.time
    assert upper is not None
    rows = client.open_leased_reader("readings").snapshot(upper - 1).to_pylist()
    got = Counter((tuple(r[n] for n in NAMES), r["_err"]) for r in rows)
    want = Counter((v, f"r.b64@{o}: {e}" if e else None) for _p, o, (v, e) in model.lines)
    assert got == want, (got, want)


def main() -> None:
    scratch = Path(sys.argv[1])
    package = spark_avro_package()
    try:
        spark = spark_session(app_name="timeshard-avro", packages=[package])
    except Exception as e:
        print(f"cannot start a SparkSession with spark-avro ({package}): {e}")
        raise SystemExit(NO_JAR) from None
    lines, times = check_ingestion(spark, scratch)
    check_read(spark, scratch)
    check_all_null_record(spark, scratch)
    check_run_command(scratch)  # last: the command stops the session
    print(f"avro checks passed: {lines} lines, the shard checked at {times} times, with {package}")


if __name__ == "__main__":
    main()
