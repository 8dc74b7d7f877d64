"""``spark_session(blob_uri="s3a://...")`` when a session already runs in the process (no JVM).

A process holds one SparkContext: jars and the executors' environment are fixed when it
starts. A running session without hadoop-aws, or whose JVM has another AWS environment, is
refused with InvalidUsage naming what is missing; one that has them gets the s3a settings
in its Hadoop configuration.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import timeshard.spark.session as session
from timeshard.errors import InvalidUsage
from timeshard.spark.session import AWS_ENV, hadoop_aws_package

ENV = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
    "AWS_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "id",
    "AWS_SECRET_ACCESS_KEY": "secret",
}


class Returned(Exception):
    """The running session's builder was reached: the checks let it through."""


def running(
    monkeypatch: pytest.MonkeyPatch,
    conf: dict[str, str],
    jvm_env: dict[str, str],
    master: str = "local[2]",
) -> dict[str, str]:
    """A running session with ``conf`` whose JVM has ``jvm_env``; its Hadoop configuration."""
    for name in AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    hadoop: dict[str, str] = {}
    sc = SimpleNamespace(
        master=master,
        getConf=lambda: conf,
        _jsc=SimpleNamespace(hadoopConfiguration=lambda: SimpleNamespace(set=hadoop.__setitem__)),
        _jvm=SimpleNamespace(
            java=SimpleNamespace(lang=SimpleNamespace(System=SimpleNamespace(getenv=jvm_env.get)))
        ),
    )

    class Builder:
        def master(self, master: str) -> Builder:
            return self

        def appName(self, name: str) -> Builder:
            return self

        def config(self, key: str, value: str) -> Builder:
            return self

        def getOrCreate(self) -> Any:
            raise Returned

    active = SimpleNamespace(sparkContext=sc)
    monkeypatch.setattr(
        session, "SparkSession", SimpleNamespace(builder=Builder(), getActiveSession=lambda: active)
    )
    monkeypatch.setattr(session, "start_jvm", lambda conf: None)
    return hadoop


def test_a_running_session_without_hadoop_aws_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    running(monkeypatch, {}, ENV)
    with pytest.raises(InvalidUsage, match=hadoop_aws_package()):
        session.spark_session(blob_uri="s3a://bucket/root")


def test_a_running_session_with_hadoop_aws_gets_the_s3a_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hadoop = running(monkeypatch, {"spark.jars.packages": hadoop_aws_package()}, ENV)
    with pytest.raises(Returned):
        session.spark_session(blob_uri="s3a://bucket/root")
    assert hadoop["fs.s3a.endpoint"] == "http://127.0.0.1:8333"
    assert hadoop["fs.s3a.path.style.access"] == "true"
    assert hadoop["fs.s3a.endpoint.region"] == "us-east-1"
    assert not any("secret" in key for key in hadoop)


def test_a_running_session_with_another_aws_environment_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaded = {"spark.jars.packages": hadoop_aws_package()}
    running(monkeypatch, loaded, {**ENV, "AWS_SECRET_ACCESS_KEY": "old"})
    with pytest.raises(InvalidUsage, match="AWS_SECRET_ACCESS_KEY") as e:
        session.spark_session(blob_uri="s3a://bucket/root")
    assert "secret" not in str(e.value).replace("SECRET", "")  # names, never values
    # a cluster's executors have the environment the context started with
    env = {f"spark.executorEnv.{k}": v for k, v in ENV.items() if k != "AWS_REGION"}
    running(monkeypatch, {**loaded, **env}, ENV, master="spark://127.0.0.1:7077")
    with pytest.raises(InvalidUsage, match=r"\['AWS_REGION'\]"):
        session.spark_session(blob_uri="s3a://bucket/root")


@pytest.mark.parametrize("name", ["AWS_REGION", "AWS_DEFAULT_REGION"])
def test_the_region_is_taken_from_either_aws_variable(name: str) -> None:
    # The AWS CLI and many setups give AWS_DEFAULT_REGION only: s3a then guessed the region
    # and the executors' pyarrow had none.
    _, conf = session.s3a_settings({name: "eu-west-3"})
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-3"
    assert conf[f"spark.executorEnv.{name}"] == "eu-west-3"


def test_aws_region_wins_over_the_default_region() -> None:
    _, conf = session.s3a_settings({"AWS_REGION": "a-1", "AWS_DEFAULT_REGION": "b-2"})
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "a-1"
