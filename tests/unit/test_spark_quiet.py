"""The JVM's command line: every setting but those whose key names a secret (no JVM starts)."""

from __future__ import annotations

from typing import Any

import pytest

from timeshard.spark.quiet import start_jvm


@pytest.mark.parametrize("log_level", ["", "warn"], ids=["quiet", "logging"])
def test_settings_naming_a_secret_stay_off_the_command_line(
    monkeypatch: pytest.MonkeyPatch, log_level: str
) -> None:
    import pyspark.java_gateway
    from pyspark import SparkContext

    monkeypatch.setenv("TIMESHARD_SPARK_LOG_LEVEL", log_level)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    launched: list[dict[str, str]] = []

    class Stop(Exception):
        pass

    def launch(conf: Any, popen_kwargs: Any = None) -> None:
        launched.append(dict(conf.getAll()))
        raise Stop

    monkeypatch.setattr(pyspark.java_gateway, "launch_gateway", launch)
    monkeypatch.setattr(SparkContext, "_gateway", None)
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
    with pytest.raises(Stop):
        start_jvm(conf)
    assert launched == [
        {
            "spark.master": "local[1]",
            "spark.executorEnv.AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
            "spark.jars.packages": "org.apache.hadoop:hadoop-aws:3.4.2",
        }
    ]
