"""COPY FROM without Spark: argument checks, file listing, and the task's decoding.

The task (:class:`CopyTask`) is called here as ``mapInArrow`` would call it,
in this process: it writes its part under a local blob root, read back with
pyarrow.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from timeshard.catalog import Catalog, CatalogEntry
from timeshard.cli.main import main
from timeshard.errors import InvalidUsage
from timeshard.location import Location, MemoryBlob, MemoryConsensus
from timeshard.persist import PersistClient
from timeshard.storage import copy_task
from timeshard.storage.copy_from import list_files, plan_copy, run_copy
from timeshard.storage.copy_task import REPORTED_ROWS, CopyTask, fits
from timeshard.storage.health import STATUS_SHARD

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


@pytest.fixture
def client(tmp_path: Path) -> PersistClient:
    client = PersistClient(Location.embedded(tmp_path / "loc"))
    writer = client.open_writer("orders", SCHEMA)
    writer.append([(("a", 1), 0, 1)], 0, 3)
    writer.expire()
    return client


@pytest.fixture
def data(tmp_path: Path) -> Path:
    directory = tmp_path / "in"
    directory.mkdir()
    (directory / "a.csv").write_text("k,v\nx,1\n")
    return directory


def test_a_plan_lists_the_files_and_takes_the_schema(client: PersistClient, data: Path) -> None:
    plan = plan_copy(client, str(data), "orders", format="csv")
    assert plan.files == (str(data / "a.csv"),)
    assert plan.schema.equals(SCHEMA) and plan.header and plan.on_error == "fail"
    assert plan_copy(client, str(data), "orders", format="json").header is False
    assert plan_copy(client, str(data), "orders", format="csv", at=3).at == 3
    assert plan_copy(client, str(data), "orders", format="csv", at=2**63 - 2).at == 2**63 - 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"format": "xml"}, "format must be one of ['csv', 'json', 'parquet'], got 'xml'"),
        ({"format": "csv", "on_error": "skip"}, "on_error must be one of"),
        ({"format": "json", "header": True}, "header=True goes with format 'csv' only"),
        ({"format": "csv", "not_null": ["k", "w"]}, "not_null names ['w']"),
        ({"format": "csv", "at": 2}, "at 2 is below the upper 3 of collection 'orders'"),
        ({"format": "csv", "at": -1}, "at must be a timestamp (an int >= 0), got -1"),
        ({"format": "csv", "at": True}, "got True"),
        ({"format": "csv", "at": 2**63 - 1}, "at must be below 9223372036854775807: the COPY's"),
        ({"format": "csv", "at": 2**63}, "a timestamp; got at 9223372036854775808"),
    ],
)
def test_bad_arguments_name_the_value(
    client: PersistClient, data: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidUsage) as e:
        plan_copy(client, str(data), "orders", **kwargs)
    assert message in str(e.value)


def test_paths_that_name_no_file(client: PersistClient, tmp_path: Path, data: Path) -> None:
    with pytest.raises(InvalidUsage, match=r"path '.*nowhere\.csv' does not exist"):
        plan_copy(client, str(tmp_path / "nowhere.csv"), "orders", format="csv")
    with pytest.raises(InvalidUsage, match=r"path '.*\*.json' matches no file"):
        plan_copy(client, str(data / "*.json"), "orders", format="json")
    empty = tmp_path / "empty"
    (empty / "_logs").mkdir(parents=True)
    (empty / "_SUCCESS").write_text("")
    (empty / "_logs" / "x.csv").write_text("k,v\n")
    with pytest.raises(InvalidUsage, match=r"directory '.*empty' holds no file"):
        plan_copy(client, str(empty), "orders", format="csv")
    with pytest.raises(InvalidUsage, match="path must be a non-empty str"):
        plan_copy(client, "", "orders", format="csv")


def test_collections_copy_cannot_write(client: PersistClient, data: Path) -> None:
    with pytest.raises(InvalidUsage, match="unknown collection 'nope'"):
        plan_copy(client, str(data), "nope", format="csv")
    with pytest.raises(InvalidUsage, match=r"invalid shard id '\.\./x'"):
        plan_copy(client, str(data), "../x", format="csv")
    for shard in ("view1", "kv", "kv.remap", "log", STATUS_SHARD):
        client.open_writer(shard, SCHEMA).expire()
    Catalog(client).record(
        [
            CatalogEntry("view1", "view", {"inputs": {}, "sql": "SELECT 1"}),
            CatalogEntry("kv", "source", {"remap": "kv.remap", "exports": {}}),
            CatalogEntry("kv", "export", {"source": "kv", "envelope": "upsert"}),
            CatalogEntry("log", "export", {"source": "log", "envelope": "none"}),
        ]
    )
    for shard, reason in [
        ("view1", "materialized view's shard"),
        ("kv", "UPSERT collection"),
        ("kv.remap", "remap shard of source 'kv'"),
        ("log", "output of source 'log', which its ingestion keeps equal"),
        (STATUS_SHARD, "catalog or status collection"),
        ("timeshard_catalog", "catalog or status collection"),
    ]:
        with pytest.raises(
            InvalidUsage, match=f"COPY cannot write collection '{shard}': .*{reason}"
        ):
            plan_copy(client, str(data), shard, format="csv")


def test_a_memory_blob_cannot_take_a_copy(data: Path) -> None:
    client = PersistClient(Location(MemoryBlob(), MemoryConsensus()))
    client.open_writer("orders", SCHEMA).expire()
    with pytest.raises(InvalidUsage, match="needs a blob with a filesystem root"):
        plan_copy(client, str(data), "orders", format="csv")


def test_attempts_must_be_positive(client: PersistClient, data: Path) -> None:
    plan = plan_copy(client, str(data), "orders", format="csv")
    with pytest.raises(InvalidUsage, match="attempts must be an int >= 1, got 0"):
        run_copy(None, client, plan, attempts=0)


def test_listing_directories_and_globs(tmp_path: Path) -> None:
    root = tmp_path / "d"
    for name in ["b.csv", "a.csv", "sub/c.csv", "sub/deep/d.csv", ".hidden", "_SUCCESS"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x\n")
    (root / "_tmp").mkdir()
    (root / "_tmp" / "e.csv").write_text("x\n")
    names = [str(root / n) for n in ["a.csv", "b.csv", "sub/c.csv", "sub/deep/d.csv"]]
    assert list_files(str(root)) == tuple(names)
    assert list_files(str(root / "a.csv")) == (names[0],)
    assert list_files(str(root / "*.csv")) == tuple(names[:2])  # * stays in one component
    assert list_files(str(root / "s?b" / "*.csv")) == (names[2],)
    assert list_files(str(root / "[s]*")) == tuple(names[2:])  # a matched directory, whole
    assert list_files("file://" + str(root / "*.csv")) == tuple("file://" + n for n in names[:2])


def test_a_file_name_that_is_not_utf8_names_the_directory_listed(tmp_path: Path) -> None:
    """pyarrow lists UTF-8 names only (a glob lists the directory before its first
    wildcard, whole): the directory listed is named, not a raw UnicodeDecodeError."""
    root = tmp_path / "d"
    (root / "sub").mkdir(parents=True)
    (root / "a.csv").write_text("x\n")
    (root / "sub" / os.fsdecode(b"caf\xe9.csv")).write_text("x\n")
    for path in (str(root), str(root / "*.csv"), "file://" + str(root)):
        with pytest.raises(InvalidUsage, match=r"COPY: the name of a file under "):
            list_files(path)
    with pytest.raises(InvalidUsage, match=rf"under '{re.escape(str(root / 'sub'))}' is not UTF-8"):
        list_files(str(root / "sub"))
    with pytest.raises(InvalidUsage, match=r"path '.*caf\\udce9.csv' is not UTF-8"):
        list_files(str(root / "sub" / os.fsdecode(b"caf\xe9.csv")))


@pytest.mark.parametrize(
    ("source", "target", "expected"),
    [
        (pa.int32(), pa.int64(), True),
        (pa.int64(), pa.int32(), False),
        (pa.uint32(), pa.int64(), True),
        (pa.uint64(), pa.int64(), False),
        (pa.int64(), pa.uint64(), False),
        (pa.int32(), pa.float64(), True),
        (pa.int64(), pa.float64(), False),
        (pa.float32(), pa.float64(), True),
        (pa.float64(), pa.float32(), False),
        (pa.int32(), pa.decimal128(12, 2), True),
        (pa.int64(), pa.decimal128(12, 2), False),
        (pa.string(), pa.large_string(), True),
        (pa.large_string(), pa.string(), False),
        (pa.null(), pa.int64(), True),
        (pa.int64(), pa.string(), False),
    ],
)
def test_parquet_types_that_fit(source: pa.DataType, target: pa.DataType, expected: bool) -> None:
    assert fits(source, target) is expected


# -- the task, outside Spark -----------------------------------------------------------------


def run_task(
    tmp_path: Path,
    files: list[Path],
    fmt: str,
    *,
    header: bool = False,
    on_error: str = "err_rows",
    not_null: tuple[str, ...] = (),
    schema: pa.Schema = SCHEMA,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The task's result row and the rows of its part."""
    root = tmp_path / "blob"
    task = CopyTask(
        "file://" + str(root),
        "orders/w1/b1",
        schema.serialize().to_pybytes(),
        fmt,
        header,
        on_error,
        not_null,
        7,
        "orders",
    )
    batch = pa.RecordBatch.from_pydict({"file": [str(f) for f in files]})
    [out] = list(task(iter([batch])))
    [result] = out.to_pylist()
    if result["part"] is None:
        return result, []
    key = json.loads(result["part"])["key"]
    return result, pq.read_table(root / key).to_pylist()


def test_csv_lines_are_numbered_and_bad_ones_become_err_rows(tmp_path: Path) -> None:
    f = tmp_path / "in.csv"
    lines = ["\ufeffv,k", "1,a", "", "x,b", '2,"c', "3,d\r", "4,e,9", ",f", "5,g"]
    f.write_text("\n".join(lines))  # no newline after the last line
    result, rows = run_task(tmp_path, [f], "csv", header=True, not_null=("v",))
    ok = [(r["k"], r["v"]) for r in rows if r["_err"] is None]
    assert ok == [("a", 1), ("d", 3), ("g", 5)]
    assert {(r["_ts"], r["_diff"]) for r in rows} == {(7, 1)}
    errs = [r["_err"] for r in rows if r["_err"] is not None]
    assert [e.split(": ")[0] for e in errs] == [f"{f}:{n}" for n in (4, 5, 7, 8)]
    assert "column 'v' (int64)" in errs[0] and "expected 2 fields, got 3" in errs[2]
    assert "columns ['v'] are null" in errs[3]
    assert all(r["k"] is None and r["v"] is None for r in rows if r["_err"] is not None)
    assert (result["rows"], result["bad"], result["stopped"]) == (7, 4, False)
    assert [b["line"] for b in result["first_bad"]] == [4, 5, 7, 8]


def test_compressed_files_are_read_by_their_extension(tmp_path: Path) -> None:
    f = tmp_path / "in.csv.gz"
    f.write_bytes(gzip.compress(b"a,1\nb,2\n"))
    result, rows = run_task(tmp_path, [f], "csv")
    assert [(r["k"], r["v"]) for r in rows] == [("a", 1), ("b", 2)] and result["bad"] == 0


def test_a_csv_header_must_name_the_collection_columns(tmp_path: Path) -> None:
    f = tmp_path / "in.csv"
    f.write_text("k,w\na,1\n")
    with pytest.raises(InvalidUsage, match=r"the CSV header of .*in.csv names the columns"):
        run_task(tmp_path, [f], "csv", header=True)
    f.write_text("a,1\n")  # without a header, fields are in the collection's order
    _, rows = run_task(tmp_path, [f], "csv")
    assert [(r["k"], r["v"]) for r in rows] == [("a", 1)]


def test_json_keys_must_be_columns_and_values_are_not_coerced(tmp_path: Path) -> None:
    f = tmp_path / "in.json"
    lines = [
        '{"k": "a", "v": 1}',
        '{"k": "b"}',
        '{"k": "c", "v": "2"}',
        '{"k": "d", "w": 3}',
        "[1]",
    ]
    f.write_text("\n".join(lines) + "\n")
    result, rows = run_task(tmp_path, [f], "json")
    assert [(r["k"], r["v"]) for r in rows if r["_err"] is None] == [("a", 1), ("b", None)]
    errs = [r["_err"] for r in rows if r["_err"] is not None]
    assert [e.split(": ")[0] for e in errs] == [f"{f}:{n}" for n in (3, 4, 5)]
    assert "unknown columns ['w']" in errs[1] and "expected a JSON object" in errs[2]
    assert result["bad"] == 3


def test_a_fault_while_decoding_fails_the_task_and_is_never_a_bad_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "in.json"
    deep = "[" * 100_000 + "]" * 100_000
    f.write_text('{"k": "a", "v": 1}\n{"k": "b", "v": ' + deep + '}\n{"k": "c", "v": 3}\n')
    result, rows = run_task(tmp_path, [f], "json")
    assert [r["k"] for r in rows] == ["a", None, "c"] and result["bad"] == 1
    assert f"{f}:2: RecursionError: " in rows[1]["_err"]
    decoded = copy_task.decode_payload

    def exhausted(line: bytes, fmt: str, schema: pa.Schema) -> dict[str, Any]:
        if b'"c"' in line:
            raise MemoryError
        return decoded(line, fmt, schema)

    monkeypatch.setattr(copy_task, "decode_payload", exhausted)
    with pytest.raises(MemoryError):
        run_task(tmp_path, [f], "json")


def test_failing_tasks_write_nothing_after_a_bad_row_and_stop_early(tmp_path: Path) -> None:
    f = tmp_path / "in.json"
    f.write_text('{"k": "a", "v": 1}\n' + '{"v": "bad"}\n' * (REPORTED_ROWS + 3))
    later = tmp_path / "later.json"
    later.write_text('{"k": "z", "v": 9}\n')
    result, rows = run_task(tmp_path, [f, later], "json", on_error="fail")
    assert all(r["_err"] is None for r in rows) and "z" not in [r["k"] for r in rows]
    assert (result["bad"], result["stopped"]) == (REPORTED_ROWS, True)
    assert [b["line"] for b in result["first_bad"]] == list(range(2, 2 + REPORTED_ROWS))
    assert result["rows"] == 1 + REPORTED_ROWS  # the later file was never read


def test_parquet_rows_are_numbered_and_columns_checked(tmp_path: Path) -> None:
    f = tmp_path / "in.parquet"
    table = pa.table({"v": pa.array([1, None, 3], pa.int32()), "k": ["a", "b", None]})
    pq.write_table(table, f, row_group_size=2)
    result, rows = run_task(tmp_path, [f], "parquet", not_null=("k",))
    assert [(r["k"], r["v"], r["_err"]) for r in rows[:2]] == [("a", 1, None), ("b", None, None)]
    assert rows[2]["k"] is None and rows[2]["v"] is None
    assert rows[2]["_err"].startswith(f"{f}:3: ValueError: columns ['k'] are null")
    assert (result["rows"], result["bad"]) == (3, 1)
    pq.write_table(pa.table({"k": ["a"], "v": [1.5]}), f)
    with pytest.raises(InvalidUsage, match="column 'v' is double, the collection has int64"):
        run_task(tmp_path, [f], "parquet")
    pq.write_table(pa.table({"k": ["a"]}), f)
    with pytest.raises(InvalidUsage, match=r"has the columns \['k'\]; collection 'orders'"):
        run_task(tmp_path, [f], "parquet")


# -- the command's argument errors (before Spark starts) --------------------------------------


def run_main(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["timeshard", *args])
    with pytest.raises(SystemExit) as e:
        main()
    code = e.value.code
    return (code if isinstance(code, int) else 0), capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "xml"], "format must be one of"),
        (["--format", "csv", "--on-error", "skip"], "--on-error must be one of"),
        (["--format", "json", "--no-header"], "header=False goes with format 'csv' only"),
        (["--format", "csv", "--into", "nope"], "unknown collection 'nope'"),
        (["--format", "csv", "--at", "1"], "at 1 is below the upper 3"),
    ],
)
def test_the_command_reports_bad_arguments_in_one_line(
    client: PersistClient,
    data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    into = [] if "--into" in args else ["--into", "orders"]
    code, err = run_main(
        ["copy", str(data), *into, *args, "-l", str(tmp_path / "loc")], capsys, monkeypatch
    )
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err


def test_a_name_with_brackets_is_taken_as_written(tmp_path: Path) -> None:
    """``[`` made a path a glob: ``data[1].csv`` named ``data1.csv`` (another file), and
    alone it matched no file."""
    root = tmp_path / "d"
    for name in ["data[1].csv", "data1.csv", "run[2]/a.csv", "run2/b.csv", "x/[c].csv"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x\n")
    assert list_files(str(root / "data[1].csv")) == (str(root / "data[1].csv"),)
    assert list_files(str(root / "run[2]" / "*.csv")) == (str(root / "run[2]" / "a.csv"),)
    assert list_files(str(root / "*" / "[c].csv")) == (str(root / "x" / "[c].csv"),)
    assert list_files(str(root / "data[0-9].csv")) == (str(root / "data1.csv"),)  # a glob
    (root / "data[1].csv").unlink()
    assert list_files(str(root / "data[1].csv")) == (str(root / "data1.csv"),)  # now a glob
