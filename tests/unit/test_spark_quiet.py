"""The JVM's command line: every setting but those whose key names a secret (no JVM starts)."""

from __future__ import annotations

from typing import Any

import pytest

from timeshard.spark.quiet import start_jvm


@pytest.mark.parametrize("log_level", ["", "warn"], ids=["quiet", "logging"])
def test_settings_naming_a_secret_stay_off_the_command_line(
    monkeypatch: pytest.MonkeyPatch, log_level: str
) -> None:
    conf = {
        "spark.master": "local[1]",
        "spark.executorEnv.AWS_ACCESS_KEY_ID": "id",
        "spark.executorEnv.AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "spark.executorEnv.AWS_SESSION_TOKEN": "t0ken",
        "spark.hadoop.fs.s3a.secret.key": "s3cr3t",
        "spark.hadoop.fs.s3a.access.key": "id",
        "spark.executorEnv.AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
        "spark.jars.packages": "org.apache.hadoop:hadoop-aws:3.4.2",
    }
    launched = _launched(monkeypatch, conf, log_level)
    assert launched == [
        {
            "spark.master": "local[1]",
            "spark.executorEnv.AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
            "spark.jars.packages": "org.apache.hadoop:hadoop-aws:3.4.2",
        }
    ]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("spark.sql.catalog.pg.url", "jdbc:postgresql://db/app?user=app&password=hunter2"),
        ("spark.hadoop.fs.s3a.endpoint", "http://alice:hunter2@127.0.0.1:8333"),
        ("spark.executorEnv.DATABASE_URL", "postgresql://app:hunter2@db/app"),
        ("spark.myapp.option", "token=hunter2"),
    ],
)
def test_settings_whose_value_holds_a_secret_stay_off_the_command_line(
    monkeypatch: pytest.MonkeyPatch, key: str, value: str
) -> None:
    """Only the keys were checked: a password in a URL's user info or a ``password=`` in a
    value went onto the JVM's command line, which every local user can read."""
    launched = _launched(monkeypatch, {"spark.master": "local[1]", key: value})
    assert launched == [{"spark.master": "local[1]"}]


@pytest.mark.parametrize(
    "key",
    [
        "spark.driver.extraJavaOptions",
        "spark.driver.defaultJavaOptions",
        "spark.driver.extraClassPath",
        "spark.jars.repositories",
    ],
)
def test_settings_the_launch_needs_stay_on_it_whatever_their_value(
    monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """The driver JVM's options take effect only on its command line: kept, with a warning
    naming the setting (never its value)."""
    import timeshard.spark.quiet as quiet

    warned: list[str] = []
    # The logger itself, not the log records: a session's quiet_python_loggers() may have
    # turned its handlers off by the time this runs.
    monkeypatch.setattr(quiet.log, "warning", lambda msg, *args: warned.append(msg % args))
    options = "-Djavax.net.ssl.trustStorePassword=hunter2"
    conf = {"spark.master": "local[1]", key: options}
    launched = _launched(monkeypatch, conf)
    assert launched == [conf]
    assert len(warned) == 1 and key in warned[0], warned
    assert "hunter2" not in warned[0]


def _launched(
    monkeypatch: pytest.MonkeyPatch, conf: dict[str, str], log_level: str = "warn"
) -> list[dict[str, str]]:
    """The settings ``start_jvm(conf)`` launches the JVM with (none is launched)."""
    import pyspark.java_gateway
    from pyspark import SparkContext

    monkeypatch.setenv("TIMESHARD_SPARK_LOG_LEVEL", log_level)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    launched: list[dict[str, str]] = []

    class Stop(Exception):
        pass

    def launch(spark_conf: Any, popen_kwargs: Any = None) -> None:
        launched.append(dict(spark_conf.getAll()))
        raise Stop

    monkeypatch.setattr(pyspark.java_gateway, "launch_gateway", launch)
    monkeypatch.setattr(SparkContext, "_gateway", None)
    with pytest.raises(Stop):
        start_jvm(conf)
    return launched


@pytest.mark.parametrize(
    ("key", "value", "warns"),
    [
        (
            "spark.jars",
            "/root/.ivy2.5.2/jars/org.apache.spark_spark-token-provider-kafka-0-10_2.13-4.1.1.jar,"
            "/opt/jars/secret-sauce.jar",
            False,
        ),
        (
            "spark.jars.packages",
            "org.apache.spark:spark-token-provider-kafka-0-10_2.13:4.1.1",
            False,
        ),
        ("spark.jars", "https://alice:hunter2@repo.example/x.jar", True),
        ("spark.driver.extraJavaOptions", "-Dfs.s3a.access.key=AKIAHUNTER2", True),
    ],
)
def test_a_launch_setting_warns_only_of_a_real_secret(
    monkeypatch: pytest.MonkeyPatch, key: str, value: str, warns: bool
) -> None:
    """Kafka's connector brings spark-token-provider-kafka: its jar's path in ``spark.jars``
    warned "setting spark.jars seems to hold a secret" at every session start, for the word
    ``token`` in a file name. A password in a URL or a secret's ``name=value`` still warns."""
    import timeshard.spark.quiet as quiet

    warned: list[str] = []
    monkeypatch.setattr(quiet.log, "warning", lambda msg, *args: warned.append(msg % args))
    conf = {"spark.master": "local[1]", key: value}
    assert _launched(monkeypatch, conf) == [conf]
    assert len(warned) == int(warns), warned
    assert "hunter2" not in "".join(warned)
