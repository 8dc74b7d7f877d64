"""Spark without its start-up noise: no log4j banner, no JVM warnings, no Ivy report.

A JVM that PySpark starts prints a dozen lines before the first job: the
incubator-module warning, "Using Spark's default log4j profile", "Setting
default log level", the native-hadoop warning and, with ``packages``, Ivy's
resolution report. None of them helps a user, and they bury the command's own
output. :func:`start_jvm` starts the JVM (PySpark's gateway) with its output
on pipes:

* until :meth:`JvmOutput.started` is called (once the session is up), every
  line is held; if the start fails, :meth:`JvmOutput.failed` prints them, so
  the reason is never lost;
* after that, every line is forwarded to this process's stdout or stderr, as
  if inherited -- errors of a running session are shown. Log4j logs errors
  only (``log4j2.properties`` beside this module).

PySpark also logs every captured query error it raises, as one JSON line with
the JVM stack trace (loggers ``SQLQueryContextLogger`` and
``DataFrameQueryContextLogger``); timeshard catches those errors and reports
them itself (an err row, an ``error:`` line), so :func:`quiet_python_loggers`
turns them off.

``TIMESHARD_SPARK_LOG_LEVEL`` (``warn``, ``info``, ...) turns all of this off:
the JVM inherits the terminal and logs at that level.

PySpark starts the JVM with ``spark-submit --conf key=value`` for every
setting, and a process's command line is readable by every local user
(``ps``, ``/proc/<pid>/cmdline``). So :func:`start_jvm` starts it, quiet or
not, without the settings whose key or value names a secret (:data:`SECRET_KEY`, Spark's
own redaction pattern plus ``ACCESS_KEY``: ``spark.executorEnv.AWS_SECRET_ACCESS_KEY``,
``fs.s3a.secret.key``, ...); the session's builder sets them over Py4J
before the SparkContext is created, which is all spark-submit would have done
with them.

Invariants:

1. The pipes are always drained (a JVM blocked on a full pipe would hang the
   session): the forwarding threads never stop before end of file, whatever
   writing fails with.
2. Forwarding writes to file descriptors 1 and 2, not to ``sys.stdout`` or
   ``sys.stderr``, which test runners and ``rich`` replace.
3. No setting whose key matches :data:`SECRET_KEY` is on the JVM's command line, nor one
   whose value does (or holds a URL's password), unless spark-submit needs it to
   launch the JVM (:data:`LAUNCH_KEYS`: its memory, Java options, class path, jars),
   which a warning then names if the value holds a password in a URL or a secret's
   ``name=value`` (:data:`SECRET_ASSIGNMENT`), not for a word in a jar's name.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import re
import struct
import termios
import threading
import time
from pathlib import Path
from typing import IO

from timeshard.errors import InvalidUsage

LOG_LEVEL_ENV = "TIMESHARD_SPARK_LOG_LEVEL"
#: The log4j2 configuration of a quiet JVM: errors only, on stderr.
LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
#: The keys of settings kept off the JVM's command line: Spark's ``spark.redaction.regex``
#: (``secret|password|token|access[.]?key``), and ``access_key`` (``AWS_ACCESS_KEY_ID``).
SECRET_KEY = re.compile(r"(?i)secret|password|token|access[._]?key")
#: A URL's user info with a password (``scheme://user:password@host``).
USER_INFO = re.compile(r"://[^/@\s:]*:[^/@\s]*@")
#: A secret given as ``name=value`` (``-Dfs.s3a.access.key=...``, ``?token=...``): what in a
#: launch setting is a secret, where the word alone may be a file's name
#: (``spark-token-provider-kafka.jar``).
SECRET_ASSIGNMENT = re.compile(
    r"(?i)(secret|password|passwd|token|access[._]?key)[\w.-]*\s*=\s*[^\s&,;]"
)
#: The settings spark-submit acts on when it launches the JVM (its memory, options, class
#: path, the jars it resolves): they stay on its command line whatever their value.
LAUNCH_KEYS = re.compile(
    r"spark[.](master|app[.]name|submit[.].*|driver[.](memory|cores|\w+JavaOptions|extra\w+)"
    r"|jars(|[.].*)|files|archives|pyFiles|repl[.].*|yarn[.].*|kubernetes[.].*)"
)

log = logging.getLogger(__name__)


def quiet() -> bool:
    """Whether Spark's JVM starts quiet (``TIMESHARD_SPARK_LOG_LEVEL`` unset or empty)."""
    return not os.environ.get(LOG_LEVEL_ENV)


#: The levels Spark's ``setLogLevel`` takes.
LOG_LEVELS = ("ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")


def log_level() -> str:
    """The level a session logs at: ``TIMESHARD_SPARK_LOG_LEVEL``, else ``ERROR``.

    InvalidUsage names a value that is not one of :data:`LOG_LEVELS` (any case).
    """
    level = (os.environ.get(LOG_LEVEL_ENV) or "ERROR").upper()
    if level not in LOG_LEVELS:
        raise InvalidUsage(
            f"{LOG_LEVEL_ENV} must be one of {list(LOG_LEVELS)} (any case), "
            f"got {os.environ[LOG_LEVEL_ENV]!r}"
        )
    return level


def quiet_java_options(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with the driver JVM logging through :data:`LOG4J2_CONFIG`, when quiet.

    A ``spark.driver.extraJavaOptions`` already naming a log4j2 configuration
    is left as it is.
    """
    if not quiet() or "log4j2.configurationFile" in conf.get(JAVA_OPTIONS, ""):
        return conf
    option = f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()}"
    return {**conf, JAVA_OPTIONS: f"{conf.get(JAVA_OPTIONS, '')} {option}".strip()}


#: PySpark's Python loggers of the query errors it raises (already reported by timeshard).
QUERY_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def quiet_python_loggers() -> None:
    """Turn off PySpark's logging of the query errors it raises, when quiet."""
    if quiet():
        for name in QUERY_ERROR_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)


class JvmOutput:
    """The JVM's stdout and stderr: held while Spark starts, forwarded once it runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[tuple[int, bytes]] | None = []
        self._forwarding = 0  # lines read from a pipe and not yet written
        pipes = {fd: os.pipe() for fd in (1, 2)}
        self._readers = [r for r, _ in pipes.values()]
        #: The write ends, for the JVM's Popen; :meth:`close_writers` once it has them.
        self.writers = {fd: w for fd, (_, w) in pipes.items()}
        self._threads = [
            threading.Thread(
                # Unbuffered: a line read is a line being forwarded (flush counts on it).
                target=self._drain,
                args=(os.fdopen(r, "rb", buffering=0), fd),
                daemon=True,
                name=f"jvm-fd{fd}",
            )
            for fd, (r, _) in pipes.items()
        ]
        for t in self._threads:
            t.start()

    def close_writers(self) -> None:
        """Close this process's copies of the write ends (the JVM holds its own)."""
        for w in self.writers.values():
            os.close(w)
        self.writers = {}

    def started(self) -> None:
        """Spark is up: drop what start-up printed (to the debug log) and forward the rest,
        also what the JVM writes just before this process exits (:meth:`flush`, at exit)."""
        with self._lock:
            held, self._held = self._held or [], None
        for _, line in held:
            log.debug("spark start-up: %s", line.decode(errors="replace").rstrip())
        atexit.register(self.flush)

    def flush(self, timeout_s: float = 2.0) -> None:
        """Wait up to ``timeout_s`` until what the JVM has written so far is forwarded.

        The forwarding threads are daemons: a process that exits right after its
        session logged an error (the JVM writes it before the call that logged it
        returns) lost the line whenever they had not run yet, as on a loaded machine.
        """
        deadline = time.monotonic() + timeout_s
        quiet = 0  # polls in a row that found nothing left (two: not a line just read)
        while time.monotonic() < deadline and quiet < 2:
            with self._lock:
                busy = self._forwarding > 0
            quiet = 0 if busy or any(_unread(r) for r in self._readers) else quiet + 1
            time.sleep(0.005)

    def held(self) -> list[bytes]:
        """The lines held so far (none once started or failed)."""
        with self._lock:
            return [line for _, line in self._held or []]

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the output to end (the JVM exited, the writers closed)."""
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def failed(self, wait_s: float = 5.0) -> None:
        """Spark did not start: print what start-up printed, then forward the rest.

        Waits up to ``wait_s`` for the rest of the output of a JVM that exited.
        """
        self.join(wait_s)
        with self._lock:
            held, self._held = self._held or [], None
        for fd, line in held:
            _write(fd, line)

    def _drain(self, stream: IO[bytes], fd: int) -> None:
        for line in iter(stream.readline, b""):
            with self._lock:
                if self._held is not None:
                    self._held.append((fd, line))
                    continue
                self._forwarding += 1
            try:
                _write(fd, line)
            finally:
                with self._lock:
                    self._forwarding -= 1


def _unread(fd: int) -> int:
    """The bytes waiting in pipe ``fd`` (0 if that cannot be told: a closed pipe)."""
    try:
        return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])
    except OSError:
        return 0


def _write(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):  # nowhere to write: drop the line, keep draining
        os.write(fd, data)


def _secret(key: str, value: str) -> bool:
    """Whether the setting is kept off the JVM's command line: its key names a secret, or
    its value holds one (as Spark's redaction reads values too, or a URL's password),
    unless the launch itself needs it (:data:`LAUNCH_KEYS`: kept, with a warning)."""
    if SECRET_KEY.search(key):
        return True
    if not (SECRET_KEY.search(value) or USER_INFO.search(value)):
        return False
    if LAUNCH_KEYS.fullmatch(key):
        if USER_INFO.search(value) or SECRET_ASSIGNMENT.search(value):
            log.warning(
                "setting %s seems to hold a secret; it takes effect only on the JVM's command "
                "line, which local users can read",
                key,
            )
        return False
    return True


def start_jvm(conf: dict[str, str]) -> JvmOutput | None:
    """Start PySpark's JVM with ``conf`` but its secrets, unless one runs already.

    The settings whose key or value holds a secret are left out of the
    command line (but those the launch needs); the caller's builder sets them
    before the SparkContext starts. When quiet, the JVM's output is on pipes and
    the :class:`JvmOutput` is returned; otherwise it inherits this process's, and
    None is returned.
    None as well if nothing was started: a JVM already runs in this process (or
    was given by ``PYSPARK_GATEWAY_PORT``).
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return None
    public = [(k, v) for k, v in conf.items() if not _secret(k, v)]
    spark_conf = SparkConf(loadDefaults=False).setAll(public)
    if not quiet():
        gateway = launch_gateway(spark_conf)  # type: ignore[no-untyped-call]
        SparkContext._ensure_initialized(gateway=gateway, conf=spark_conf)
        return None
    output = JvmOutput()
    try:
        gateway = launch_gateway(  # type: ignore[no-untyped-call]
            spark_conf, popen_kwargs={"stdout": output.writers[1], "stderr": output.writers[2]}
        )
    except BaseException:
        output.close_writers()
        output.failed()
        raise
    output.close_writers()
    SparkContext._ensure_initialized(gateway=gateway, conf=spark_conf)
    return output


__all__ = [
    "LOG4J2_CONFIG",
    "LOG_LEVELS",
    "QUERY_ERROR_LOGGERS",
    "LOG_LEVEL_ENV",
    "SECRET_KEY",
    "JvmOutput",
    "log_level",
    "quiet",
    "quiet_java_options",
    "quiet_python_loggers",
    "start_jvm",
]
