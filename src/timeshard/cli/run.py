"""``timeshard run``: run the sources, views and exports a declaration file declares.

Before Spark starts, the declaration (:mod:`timeshard.spec`) is checked in
full against the location's shards and catalog, read at the start; an
embedded location that does not exist yet is not created for that
(:func:`_existing_client`), so a bad declaration writes nothing. A source
whose server is unreachable is not a bad declaration: it is printed
``stalled``, and the rest, without it and without what reads a shard only it
would write (:func:`_checkable`), is checked and runs; the pipeline builds it,
and checks what reads it, once its server answers.

A :class:`~timeshard.controller.Pipeline` is then stepped about once a second
for ``--seconds``, each tick printing its duration and the shards' uppers;
stderr names each object that stalled (``stalled:``) and each view or export
the location still has that the file no longer declares (``undeclared:``,
which ``timeshard drop`` releases). At the end, on a failure or on Ctrl-C,
what was built is closed (after a failed run a failing close is printed, not
raised: :func:`_close_after`) and Spark stops. If the Spark JVM exits, the run
stops at once with exit code 3, closing nothing through it.

Runs on the driver: the checks, the tick loop and the pipeline's control. The
sources' reads, the views and the exports are Spark jobs on the executors.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from timeshard.cli.options import check_seconds, console, err_console, location_from
from timeshard.errors import InvalidUsage
from timeshard.persist import PersistClient
from timeshard.spec import DEFAULT_DIR, RunSpec


def run(
    file: Annotated[Path, typer.Argument(help="A TOML file declaring sources and views.")],
    seconds: Annotated[float, typer.Option(help="How long to run.")] = 30.0,
) -> None:
    """Run the sources and views a declaration file declares (see timeshard.spec).

    The file is checked in full (sources' options, views' inputs) before Spark
    starts, and a bad one writes nothing. A source whose server is unreachable is
    not a bad declaration: it is shown ``stalled``, the rest is checked and runs,
    and the run builds it (and checks what reads it) once its server answers.
    """
    from timeshard.catalog import read_catalog
    from timeshard.cli.serve import JVM_EXITED, jvm_gone
    from timeshard.controller import Pipeline, read_at_start
    from timeshard.spark import spark_session
    from timeshard.spec import check_spec, load_spec, spark_packages

    check_seconds(seconds)
    spec = load_spec(file)
    loc = spec.location
    directory = Path(loc.dir or DEFAULT_DIR)
    existing = _existing_client(directory, loc.blob, loc.consensus)
    shards, catalog = (
        read_at_start(
            lambda: (existing.list_shards(), read_catalog(existing)),
            "the location's shards and catalog",
        )
        if existing is not None
        else ([], [])
    )
    try:
        check_spec(spec, existing=shards, catalog=catalog)
    except InvalidUsage:
        raise
    except Exception:  # a source's server unreachable: the run retries it (its health says)
        unreachable = _unreachable_sources(spec)
        if not unreachable:
            raise
        for name, error in unreachable.items():
            err_console.print(f"stalled: {escape(name)}: {escape(error)}", soft_wrap=True)
        check_spec(_checkable(spec, set(unreachable), set(shards)), shards, catalog)
    client = PersistClient(location_from(directory, loc.blob, loc.consensus, create=True))
    spark = spark_session(
        master=spec.spark.master,
        app_name="timeshard-run",
        extra_conf=spec.spark.conf,
        packages=spark_packages(spec),
        blob_uri=client.location.blob_uri,
    )
    pipeline = None
    jvm = True
    ran = False
    try:  # a failure (a Ctrl-C too) closes what was built: its leases would linger
        pipeline = Pipeline(spark, client, spec)
        for held in pipeline.undeclared:  # its inputs compact no further until it is dropped
            err_console.print(f"undeclared: {escape(held.line())}", soft_wrap=True)
        for obj, error in pipeline.first_failures.items():  # retried on the next tick
            err_console.print(f"stalled: {escape(obj)}: {escape(error)}", soft_wrap=True)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if jvm_gone("run"):
                jvm = False
                raise typer.Exit(JVM_EXITED)
            tick = time.monotonic()
            failures = pipeline.step()
            try:  # a fault reading them is shown; the objects go on (their health says)
                uppers = ", ".join(f"{s}@{upper}" for s, upper in pipeline.uppers().items())
            except Exception as e:
                uppers = f"uppers unknown: {type(e).__name__}: {str(e)[:300]}"
            console.print(f"tick {time.monotonic() - tick:.2f} s: {escape(uppers)}")
            for obj, error in failures.items():  # retried on the next tick
                err_console.print(f"stalled: {escape(obj)}: {escape(error)}", soft_wrap=True)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        ran = True
    finally:
        if jvm:  # with the JVM gone, closing through it would fail or hang
            try:
                if pipeline is not None:
                    _close_after(pipeline, ran)
            finally:
                spark.stop()


def _unreachable_sources(spec: RunSpec) -> dict[str, str]:
    """The declared sources whose build faults now (their server unreachable), each with
    its fault; a refusal (InvalidUsage) is raised."""
    from timeshard.spec import build_source, checked_only

    out = {}
    for s in spec.source:
        try:
            build_source(checked_only(s))
        except InvalidUsage:
            raise
        except Exception as e:
            out[s.name] = f"{type(e).__name__}: {str(e)[:300]}"
    return out


def _checkable(spec: RunSpec, unreachable: set[str], existing: set[str]) -> RunSpec:
    """``spec`` without the ``unreachable`` sources, and without the views and exports that
    read a shard only they would write (one ``existing`` lacks), or such a view: what
    ``check_spec`` can check while they are unreachable (the run checks the rest when it
    builds them)."""
    late: set[str] = set()

    def waits(shard: str) -> bool:
        if shard in existing:
            return False
        return shard in late or any(shard == n or shard.startswith(f"{n}.") for n in unreachable)

    views = []
    for v in spec.view:
        if any(waits(shard) for shard in v.inputs.values()):
            late.add(v.name)
        else:
            views.append(v)
    return spec.model_copy(
        update={
            "source": [s for s in spec.source if s.name not in unreachable],
            "view": views,
            "export": [e for e in spec.export if not waits(e.input)],
        }
    )


def _close_after(pipeline: Any, ran: bool) -> None:
    """Close ``pipeline``; after a failed run, a failing close is printed, not raised (the
    run's own failure is the one to see)."""
    try:
        pipeline.close()
    except Exception as e:
        if ran:
            raise
        err_console.print(f"closing after the failure failed too: {escape(repr(e))}")


def _existing_client(
    directory: Path, blob: str | None, consensus: str | None
) -> PersistClient | None:
    """A client of the location, or None for an embedded one that does not exist (it is
    not created: a declaration that fails its checks writes nothing)."""
    if blob is None and consensus is None and not (directory / "consensus.sqlite").is_file():
        return None
    return PersistClient(location_from(directory, blob, consensus, create=True))


__all__ = ["run"]
