"""An Apache Kafka broker on 127.0.0.1, in KRaft mode, from its Maven Central jars.

For the tests and for ``timeshard dev kafka``: nothing to install but Java
and Maven. :func:`kafka_jars` fetches ``org.apache.kafka:kafka_2.13`` and its
runtime dependencies once, with ``mvn dependency:copy-dependencies``, into
``$TIMESHARD_CACHE`` (default ``~/.cache/timeshard``) ``/kafka/<version>``;
the directory appears whole or not at all (it is renamed into place). Maven
downloads into ``$TIMESHARD_CACHE/maven``, not ``~/.m2``, where Spark's Ivy
would take the pom Maven leaves alone of a version it mediated away (slf4j-api
2.0.17) and fail every session loading the Kafka or Avro connector.

:class:`KafkaBroker` runs one combined broker and controller (``node.id`` 1)
with its data in a directory of its own: ``start`` formats the storage the
first time (``kafka.tools.StorageTool format --standalone``) and starts
``kafka.Kafka`` as the leader of its own process group, then waits until the
broker answers a metadata request (:class:`~timeshard.dev.daemon.Daemon`).
``stop`` ends it (SIGTERM, then SIGKILL); ``kill`` is SIGKILL, as a crash;
``restart`` starts it again on the same
ports with the same data (topics, committed offsets and transactions stay).
A start that fails raises :class:`KafkaUnavailable` with the end of the
broker's log; a broker whose JVM exited fails at once, one still starting
(its log growing) is given more time than one that is stuck.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from timeshard.cache import cache_dir
from timeshard.dev.daemon import Daemon, DevServer, free_port

KAFKA_VERSION = "4.1.1"
SLF4J_BINDING = ("org.slf4j", "slf4j-reload4j", "2.0.17")
START_TIMEOUT_S = 90.0
STUCK_AFTER_S = 30.0

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>timeshard.dev</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>{slf4j[0]}</groupId><artifactId>{slf4j[1]}</artifactId>
      <version>{slf4j[2]}</version>
    </dependency>
  </dependencies>
</project>
"""


class KafkaUnavailable(Exception):
    """The broker cannot be fetched or started; the message says why, on one line or two."""


def kafka_jars(version: str = KAFKA_VERSION, cache: Path | None = None) -> Path:
    """The directory of the broker's jars, fetched from Maven Central the first time."""
    cache = cache or cache_dir()
    target = cache / "kafka" / version
    if (target / ".complete").exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaUnavailable(
            "Maven (mvn) is not installed; it fetches the Kafka broker's jars "
            "(apt-get install maven)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():  # not ours: ours appear whole, with the marker, by a rename
        shutil.rmtree(target, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        work = Path(tmp)
        (work / "pom.xml").write_text(_POM.format(version=version, slf4j=SLF4J_BINDING))
        jars = work / "jars"
        result = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(work / "pom.xml"),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={jars}",
                "-DincludeScope=runtime",
                # A repository of its own: Maven leaves the pom alone of a version it
                # mediated away (slf4j-api's), and Spark's Ivy, which looks in ~/.m2 first,
                # then takes that pom and fails to find the jar beside it.
                f"-Dmaven.repo.local={cache / 'maven'}",
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if result.returncode != 0 or not any(jars.glob("kafka_2.13-*.jar")):
            tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
            raise KafkaUnavailable(
                f"mvn could not fetch org.apache.kafka:kafka_2.13:{version}: " + " | ".join(tail)
            )
        (jars / ".complete").touch()
        with contextlib.suppress(OSError):  # another process renamed its copy first
            jars.rename(target)
    if not (target / ".complete").exists():
        raise KafkaUnavailable(f"the jar cache {target} is incomplete; remove it and retry")
    return target


def server_properties(data: Path, port: int, controller_port: int) -> str:
    """The broker's configuration: one node, broker and controller, on loopback."""
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={data}",
            "num.partitions=1",
            "auto.create.topics.enable=false",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=4",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "transaction.state.log.num.partitions=4",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "log.flush.interval.messages=1000000",
            "",
        ]
    )


class KafkaBroker(DevServer):
    """One Kafka broker (KRaft, combined mode) on 127.0.0.1 (module doc)."""

    def __init__(
        self, workdir: Path, port: int | None = None, version: str = KAFKA_VERSION
    ) -> None:
        self.workdir = Path(workdir)
        self.version = version
        self.port = port or free_port()
        self.controller_port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log_path = self.workdir / "broker.log"
        self._daemon = Daemon("the broker", self.log_path, KafkaUnavailable)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Start the broker (formatting its storage the first time); its bootstrap servers."""
        jars = kafka_jars(self.version)
        self.workdir.mkdir(parents=True, exist_ok=True)
        data = self.workdir / "data"
        config = self.workdir / "server.properties"
        config.write_text(server_properties(data, self.port, self.controller_port))
        classpath = f"{jars}/*"
        java = _java()
        if not (data / "meta.properties").exists():
            fmt = subprocess.run(
                [
                    java,
                    "-Xmx256m",
                    "-cp",
                    classpath,
                    "kafka.tools.StorageTool",
                    "format",
                    f"--cluster-id={_cluster_id()}",
                    "-c",
                    str(config),
                    "--standalone",
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if fmt.returncode != 0:
                raise KafkaUnavailable(
                    f"formatting the broker's storage failed: {(fmt.stdout + fmt.stderr)[-600:]}"
                )
        self._daemon.spawn(
            [java, "-Xms128m", "-Xmx512m", "-cp", classpath, "kafka.Kafka", str(config)]
        )
        self._wait_ready(timeout_s)
        return self.bootstrap

    def _wait_ready(self, timeout_s: float) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "logger": _quiet()})

        def answers() -> bool:
            # Ours, not another broker that holds the port: the cluster id tells.
            return bool(admin.list_topics(timeout=2).cluster_id == self._cluster_id())

        self._daemon.wait_ready(answers, self.bootstrap, timeout_s)

    def _cluster_id(self) -> str | None:
        """The cluster id the storage was formatted with (``meta.properties``)."""
        meta = self.workdir / "data" / "meta.properties"
        with contextlib.suppress(OSError):
            for line in meta.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1].strip()
        return None


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    config: dict[str, str] | None = None,
    timeout_s: float = 30.0,
) -> None:
    """Create topic ``name`` and wait until its partitions are in the metadata."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _quiet()})
    new = NewTopic(name, num_partitions=partitions, config=config or {})
    admin.create_topics([new])[name].result(timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        topic = admin.list_topics(name, timeout=timeout_s).topics.get(name)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions:
            return
        if time.monotonic() > deadline:
            raise KafkaUnavailable(f"topic {name!r} has no {partitions} partitions yet")
        time.sleep(0.1)


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise KafkaUnavailable("java is not installed (the broker is a JVM)")
    return java


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 characters).

    Never one that starts with ``-``: the storage tool's argument parser reads
    such an id as an option (one start in 64 failed so), and Kafka's own
    ``Uuid.randomUuid`` draws again for the same reason.
    """
    import base64

    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _quiet() -> Any:
    import logging

    logger = logging.getLogger("timeshard.dev.kafka")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


__all__ = [
    "KAFKA_VERSION",
    "KafkaBroker",
    "KafkaUnavailable",
    "create_topic",
    "kafka_jars",
    "server_properties",
]
