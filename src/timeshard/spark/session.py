"""The SparkSession timeshard runs on, and Spark <-> Arrow schema conversions.

Everything here runs on the driver. :func:`spark_session` sets what PySpark
needs on a small machine and what timeshard relies on:

* the loopback address (``SPARK_LOCAL_IP``, default ``127.0.0.1``) for the
  driver, and the Python running this process for the Python workers
  (``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON``), which must be able to
  import ``pyarrow`` and ``timeshard``;
* Arrow transfers between the JVM and Python (``mapInArrow``, ``toArrow``);
* few shuffle partitions (4), no adaptive execution (see ``DEFAULT_CONF``), no UI;
* ``ignoreCorruptFiles``/``ignoreMissingFiles`` off: a part that cannot be read
  is an error, never an empty result;
* Parquet page checksums verified (``parquet.page.verify-checksum.enabled``): a
  part whose page was altered is an error, never other data;
* no start-up noise, and errors only in the log (:mod:`timeshard.spark.quiet`;
  ``TIMESHARD_SPARK_LOG_LEVEL=warn`` brings Spark's logging back).

Connectors that need Maven jars (Kafka, hadoop-aws, spark-avro, ...) are
loaded only when ``packages`` names them (or, for hadoop-aws, when the
location's blob is on S3), so a session starts without network access.
:func:`spark_avro_package` is the spark-avro coordinate matching the running
PySpark; :func:`requires_spark_avro` turns the failure of a session without
it into an InvalidUsage naming that package. :func:`s3a_settings` is what an
S3 blob needs: hadoop-aws at Spark's Hadoop version, and the endpoint of the
AWS environment.

Invariants:

1. ``arrow_to_spark_schema(spark_to_arrow_schema(s)) == s`` for every Spark
   schema ``s`` of the types timeshard stores; timestamps without a time zone
   map to ``TimestampNTZType``, UTC ones to ``TimestampType``.
2. An Arrow type Spark cannot represent raises InvalidUsage naming the column.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyspark
from pyspark import SparkContext
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
from pyspark.sql.types import StructField, StructType

from timeshard.errors import InvalidUsage
from timeshard.spark.jars import (
    holds_python,
    ivy_settings,
    loaded_packages,
    package_conf,
    remember,
)
from timeshard.spark.quiet import (
    log_level,
    quiet_java_options,
    quiet_python_loggers,
    start_jvm,
)

#: The FAIR scheduler's pools: ticks before background merges and checks (the file's comment).
FAIR_POOLS = Path(__file__).with_name("fair-pools.xml")

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    "spark.sql.files.ignoreCorruptFiles": "false",
    "spark.sql.files.ignoreMissingFiles": "false",
    # Parts carry Parquet page checksums (CRC32), which Spark's Parquet reader skips
    # unless told: a byte flipped in a part's page was read as another value.
    "spark.hadoop.parquet.page.verify-checksum.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    # A tick's queries are small and many-staged; adaptive execution runs each
    # stage as a job of its own and re-plans between them, which on local[2]
    # cost more than it saved (an upsert tick: 34 jobs and 6.6 s with it, 8
    # jobs and 4.1 s without). Turn it back on with extra_conf for big batches.
    "spark.sql.adaptive.enabled": "false",
    # Background work (the upsert's layer merges) runs in a pool of its own and
    # shares the cores with the tick's job instead of queueing before it; the
    # pools' shares (fair-pools.xml) give a free core to a tick's task first.
    "spark.scheduler.mode": "FAIR",
    "spark.scheduler.allocation.file": FAIR_POOLS.as_uri(),
    # Reading more than 32 part files listed them in a Spark job of its own; the
    # driver already knows every part (from the shard state), so list on the driver.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
    # PySpark records the Python call site of every DataFrame and Column call in
    # the JVM (for error messages): three or four more Py4J round trips and a
    # stack walk per call. A tick builds its plans from hundreds of such calls,
    # so this was a third of an UPSERT tick's driver time at 1M keys.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # The Python workers' daemon: PySpark's, without the archives Spark puts first on
    # their path, which cost 300-400 ms per Python task (see timeshard.pyspark_daemon).
    "spark.python.daemon.module": "timeshard.pyspark_daemon",
    # Spark compiles the Java it generates for a stage once per distinct source,
    # and names the class after the stage's number in its plan. A tick's plan
    # numbers its stages by how many layers its arrangements hold at the time,
    # so the same stage got a new name, and was compiled anew, whenever a merge
    # changed that count (a join view: 8-28 classes a tick). One name for every
    # stage lets the cache find it: a join view's ticks compiled none after the
    # first (1M rows, 1% change a tick, 10 ticks).
    "spark.sql.codegen.useIdInClassName": "false",
    # That cache holds 100 classes by default, in 4 segments that evict on their own
    # (Guava's), so about 25 per segment: a min/max view's tick generates about 55
    # distinct classes, and each tick compiled most of them again (54-78 a tick, in 9
    # ticks of test_tick_cost's min/max view); with 2,000, none from the 4th tick on.
    # A class takes a few KB to a few hundred KB of the driver's metaspace.
    "spark.sql.codegen.cache.maxEntries": "2000",
    # Every query's execution writes its plan's description for the SQL tab's event,
    # whether or not the UI is on, in this mode; "formatted" (the default) took 45 ms
    # for a join view's write, "simple" 3 ms (explainString on its plan, 1M rows).
    "spark.sql.ui.explainMode": "simple",
}


#: Java Avro's limits on the length one datum may declare for a string, a bytes value
#: and the items of an array or map (JVM system properties, Avro 1.11.3 on). Avro
#: allocates the declared length before reading it: seven corrupt bytes declaring a
#: 2 GiB string threw OutOfMemoryError in the task, which spark-avro's PERMISSIVE mode
#: does not catch, and the executor died (in local mode, the driver too) at every retry
#: of the tick that read the record. Past a limit Avro raises SystemLimitException,
#: and the datum is an err row, as any corrupt one. 64 MiB is COPY's longest line.
AVRO_LIMITS: dict[str, str] = {
    "org.apache.avro.limits.string.maxLength": str(64 << 20),
    "org.apache.avro.limits.bytes.maxLength": str(64 << 20),
    "org.apache.avro.limits.collectionItems.maxLength": str(16 << 20),
}


def spark_avro_options(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with :data:`AVRO_LIMITS` in the driver's and the executors' JVM options;
    a limit those options name already is left as it is."""
    out = dict(conf)
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        options = out.get(key, "")
        named = {o.split("=", 1)[0] for o in options.split()}
        added = [f"-D{k}={v}" for k, v in AVRO_LIMITS.items() if f"-D{k}" not in named]
        if added:
            out[key] = " ".join([options, *added]).strip()
    return out


def spark_session(
    master: str = "local[2]",
    app_name: str = "timeshard",
    extra_conf: dict[str, str] | None = None,
    packages: list[str] | None = None,
    blob_uri: str | None = None,
) -> SparkSession:
    """Get or create the process's SparkSession with timeshard's settings.

    ``extra_conf`` overrides :data:`DEFAULT_CONF`; ``packages`` (Maven
    coordinates) become ``spark.jars.packages`` the first time, and the jars
    that resolution left after (:mod:`timeshard.spark.jars`). ``blob_uri`` is the
    location's blob: an ``s3a://``/``s3://`` one adds :func:`s3a_settings`
    (hadoop-aws and the endpoint of the AWS environment). A
    ``spark.jars.packages`` in ``extra_conf`` replaces ``packages`` and
    hadoop-aws: the caller names every package then (a mirror's, say).
    A process holds one SparkContext: if a session is already running, it is returned with its
    master unchanged and only runtime settings applied -- unless it lacks one
    of ``packages`` (hadoop-aws included, for an S3 blob), which raises
    InvalidUsage naming them (jars load only when the context starts, so the
    caller would get a session without them). For an S3 blob, the running
    context's Hadoop configuration gets the s3a settings, and a context whose
    executors started with another AWS environment (:data:`AWS_ENV`) raises
    InvalidUsage naming the variables.
    """
    own = (extra_conf or {}).get("spark.jars.packages")
    if own is not None:  # the caller's list replaces timeshard's (a mirror's coordinates, say)
        packages = [p.strip() for p in own.split(",") if p.strip()]
    on_s3 = blob_uri is not None and blob_uri.split("://", 1)[0] in ("s3", "s3a")
    if on_s3:
        s3_packages, s3_conf = s3a_settings()
        if own is None:
            packages = [*(packages or []), *(p for p in s3_packages if p not in (packages or []))]
        extra_conf = {**s3_conf, **(extra_conf or {})}
    running = SparkSession.getActiveSession()
    if running is not None:
        _check_packages(running.sparkContext, packages or [])
        if on_s3:
            _use_s3a(running.sparkContext, extra_conf or {})
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf = {
        **DEFAULT_CONF,
        "spark.driver.host": os.environ["SPARK_LOCAL_IP"],
        "spark.driver.bindAddress": os.environ["SPARK_LOCAL_IP"],
        "spark.executorEnv.PYSPARK_PYTHON": os.environ["PYSPARK_PYTHON"],
    }
    conf.update(extra_conf or {})
    if packages:
        conf.pop("spark.jars.packages", None)  # set again, or the jars resolved before
        settings = None if "spark.jars.ivySettings" in conf else ivy_settings()
        if settings is not None:  # no ~/.m2 (timeshard.spark.jars)
            conf["spark.jars.ivySettings"] = settings
        conf.update(package_conf(packages, conf))
    conf = quiet_java_options(spark_avro_options(conf))
    level = log_level()  # checked before the JVM starts
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    starts = SparkContext._active_spark_context is None
    # The JVM starts here when none runs yet, without the secrets (the builder sets them):
    # quiet, unless TIMESHARD_SPARK_LOG_LEVEL is set.
    output = start_jvm({"spark.master": master, "spark.app.name": app_name, **conf})
    try:
        spark = builder.getOrCreate()
    except BaseException:
        if output is not None:
            output.failed()
        raise
    if output is not None:
        output.started()
    if starts and packages:
        remember(spark.sparkContext, packages, conf)
    spark.sparkContext.setLogLevel(level)
    drop_jars_without_python(spark.sparkContext)
    quiet_python_loggers()
    return spark


def _check_packages(sc: SparkContext, packages: list[str]) -> None:
    """InvalidUsage naming the ``packages`` the running context ``sc`` did not load."""
    loaded = loaded_packages(sc)
    missing = [p for p in packages if p not in loaded]
    if missing:
        raise InvalidUsage(
            f"a SparkSession already runs in this process without the packages {missing}: "
            "a process holds one SparkContext, and packages load only when it starts; "
            "stop it first, or start the first session with them"
        )


def _use_s3a(sc: SparkContext, conf: dict[str, str]) -> None:
    """Set the s3a settings of ``conf`` on the running context ``sc``, whose JVM and executors
    must have this process's AWS environment (they keep the one they started with).

    Local executors are the driver's JVM, which inherited its environment; a cluster's got
    ``spark.executorEnv``. InvalidUsage names the variables that differ, never their values.
    """
    jvm_env = sc._jvm.java.lang.System.getenv  # type: ignore[union-attr]
    started = sc.getConf()
    local = (sc.master or "").startswith("local")
    differ = [
        name
        for name in AWS_ENV
        if jvm_env(name) != os.environ.get(name)
        or (not local and started.get(f"spark.executorEnv.{name}") != os.environ.get(name))
    ]
    if differ:
        raise InvalidUsage(
            f"a SparkSession already runs in this process with other values of {differ} "
            "than this process's environment: its JVM and executors keep the AWS environment "
            "they started with; stop it first, or set these before the first session starts"
        )
    hadoop = sc._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    for key, value in conf.items():
        if key.startswith("spark.hadoop.fs.s3a."):
            hadoop.set(key.removeprefix("spark.hadoop."), value)


def drop_jars_without_python(sc: SparkContext) -> list[str]:
    """Take the jars that hold no Python module off the Python path of ``sc``'s tasks.

    spark-submit lists every jar of ``spark.jars.packages`` (Kafka's, Avro's,
    hadoop-aws's and their dependencies) in ``spark.submit.pyFiles``, since a
    jar may carry Python code, and PySpark then puts each on the path of the
    driver and of every Python task. A worker re-reads the directory of each
    archive on its path at every task start (:mod:`timeshard.pyspark_daemon`),
    for nothing when the jar holds no ``.py`` file. Those are dropped; a jar
    that holds Python, or cannot be read here, stays. Returns the names dropped.
    """
    from pyspark import SparkFiles

    includes = sc._python_includes
    if not includes:
        return []
    root = SparkFiles.getRootDirectory()
    dropped = [
        name
        for name in includes
        if name.lower().endswith(".jar") and not holds_python(os.path.join(root, name))
    ]
    for name in dropped:
        includes.remove(name)
        path = os.path.join(root, name)
        with contextlib.suppress(ValueError):
            sys.path.remove(path)
        sys.path_importer_cache.pop(path, None)
    return dropped


def jvm_exit(proc: subprocess.Popen[bytes] | None = None) -> str | None:
    """Why this process's Spark JVM (``proc``: PySpark's) has exited; None while it runs.

    None as well when this process did not start one (none yet, or a gateway
    given by ``PYSPARK_GATEWAY_PORT``). A driver whose JVM is gone cannot
    recover: every Spark call fails, so a long-running command stops and says
    so (a supervisor restarts it; every object resumes where its shards end).
    """
    if proc is None:
        proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return None
    code = proc.poll()
    if code is None:
        return None
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"the Spark JVM (pid {proc.pid}) was killed by {signal.Signals(-code).name}"
    return f"the Spark JVM (pid {proc.pid}) exited with code {code}"


SPARK_AVRO_PACKAGE_ENV = "TIMESHARD_SPARK_AVRO_PACKAGE"
AVRO_NOT_LOADED = "AVRO_NOT_LOADED_SQL_FUNCTIONS_UNUSABLE"


def spark_avro_package() -> str:
    """The Maven coordinate of spark-avro for the running PySpark (Scala 2.13).

    ``org.apache.spark:spark-avro_2.13:<the running PySpark's version>``:
    Spark's connectors must match it exactly (pyproject pins a PySpark whose
    connectors are all on Maven Central). The environment variable
    ``TIMESHARD_SPARK_AVRO_PACKAGE`` names another coordinate (a mirror with
    another group).
    """
    return os.environ.get(SPARK_AVRO_PACKAGE_ENV) or spark_package("spark-avro")


def spark_kafka_package() -> str:
    """The Maven coordinate of Spark's Kafka connector for the running PySpark (Scala 2.13)."""
    return spark_package("spark-sql-kafka-0-10")


HADOOP_AWS_PACKAGE_ENV = "TIMESHARD_HADOOP_AWS_PACKAGE"
#: The AWS environment passed on to executors (a standalone worker's executors
#: do not inherit the driver's). The secret is never on the JVM's command line
#: (:func:`timeshard.spark.quiet.start_jvm`), and Spark's UI redacts it (its
#: default ``spark.redaction.regex`` matches ``secret``).
AWS_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)


def hadoop_aws_package() -> str:
    """``org.apache.hadoop:hadoop-aws`` at the Hadoop version PySpark ships (its client jar).

    hadoop-aws must match Spark's Hadoop exactly. ``TIMESHARD_HADOOP_AWS_PACKAGE``
    names another coordinate (a mirror).
    """
    override = os.environ.get(HADOOP_AWS_PACKAGE_ENV)
    if override:
        return override
    jars = Path(pyspark.__file__).parent / "jars"
    found = sorted(jars.glob("hadoop-client-api-*.jar"))
    if not found:
        raise InvalidUsage(f"no hadoop-client-api jar in {jars}: Spark's Hadoop version is unknown")
    version = found[-1].name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    return f"org.apache.hadoop:hadoop-aws:{version}"


def s3a_settings(env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The packages and settings that let Spark read ``s3a://`` parts, from the AWS environment.

    hadoop-aws (:func:`hadoop_aws_package`); with ``AWS_ENDPOINT_URL_S3`` or
    else ``AWS_ENDPOINT_URL`` (an S3 other than AWS: SeaweedFS, MinIO, ...),
    as pyarrow and the AWS SDKs choose, its endpoint, path-style access, and
    TLS only for ``https``; ``AWS_REGION`` (else ``AWS_DEFAULT_REGION``) as the
    endpoint's region; and the
    AWS variables (:data:`AWS_ENV`) as executor environment, for the tasks'
    pyarrow and for s3a's environment credentials. Credentials themselves are
    left to s3a's default chain, which reads the environment's key, secret and
    session token (STS's temporary credentials), then the instance's role.
    """
    env = dict(os.environ if env is None else env)
    conf: dict[str, str] = {}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
            endpoint.startswith("https://")
        ).lower()
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")  # as the AWS SDKs take it
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    for name in AWS_ENV:
        if env.get(name):
            conf[f"spark.executorEnv.{name}"] = env[name]
    return [hadoop_aws_package()], conf


def spark_package(artifact: str) -> str:
    """``org.apache.spark:<artifact>_2.13:<the running PySpark's version>``."""
    return f"org.apache.spark:{artifact}_2.13:{pyspark.__version__}"


@contextlib.contextmanager
def requires_spark_avro() -> Iterator[None]:
    """Re-raise the JVM's "spark-avro is not loaded" failures as InvalidUsage.

    Wrap the driver code that plans spark-avro functions (``from_avro``). A
    session without the jar fails there, before any job runs: Spark 4's
    analyzer raises ``AVRO_NOT_LOADED_SQL_FUNCTIONS_UNUSABLE`` (the functions
    live in spark-sql-api, the expressions in the jar), and PySpark raises a
    ``TypeError`` about a ``JavaPackage`` when the functions class itself is
    missing. Both become an InvalidUsage naming :func:`spark_avro_package`.
    Nothing is downloaded to find out.
    """
    try:
        yield
    except AnalysisException as e:
        if e.getCondition() != AVRO_NOT_LOADED:
            raise
        raise _no_spark_avro(e) from e
    except TypeError as e:
        if "JavaPackage" not in str(e):
            raise
        raise _no_spark_avro(e) from e


def _no_spark_avro(cause: Exception) -> InvalidUsage:
    package = spark_avro_package()
    return InvalidUsage(
        f"Avro decoding needs spark-avro, which this SparkSession lacks: start the session "
        f"with the package {package!r}, e.g. spark_session(packages=[{package!r}]) or "
        f"spark.jars.packages={package} ({type(cause).__name__}: {str(cause)[:200]})"
    )


def arrow_to_spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema (nullability kept)."""
    fields = []
    for field in schema:
        try:
            data_type = from_arrow_type(field.type, prefer_timestamp_ntz=True)
        except (PySparkException, TypeError) as e:
            raise InvalidUsage(
                f"column {field.name!r} has Arrow type {field.type}, which Spark cannot hold: {e}"
            ) from None
        fields.append(StructField(field.name, data_type, nullable=field.nullable))
    return StructType(fields)


def spark_to_arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of a Spark schema (``TimestampType`` as UTC microseconds)."""
    return to_arrow_schema(schema, timestamp_utc=True)


__all__ = [
    "AVRO_NOT_LOADED",
    "AWS_ENV",
    "AVRO_LIMITS",
    "DEFAULT_CONF",
    "HADOOP_AWS_PACKAGE_ENV",
    "SPARK_AVRO_PACKAGE_ENV",
    "arrow_to_spark_schema",
    "hadoop_aws_package",
    "jvm_exit",
    "requires_spark_avro",
    "s3a_settings",
    "spark_avro_options",
    "spark_avro_package",
    "spark_kafka_package",
    "spark_package",
    "spark_session",
    "spark_to_arrow_schema",
]
