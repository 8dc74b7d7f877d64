"""S3 credentials reach the executors of a session without appearing on a command line.

The JVM's command line (``/proc/<pid>/cmdline``) is readable by every local
user, so no setting holding a secret may be a ``--conf`` of spark-submit;
the executors still get the AWS environment (Python tasks read it, and s3a
signs with it). Each case is its own process: a process starts one JVM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.s3]

SCRIPT = """
import json, os, sys
from pyspark import SparkContext
from timeshard.spark import spark_session

blob = sys.argv[1]
spark = spark_session(master="local[1]", blob_uri=blob)
secret = os.environ["AWS_SECRET_ACCESS_KEY"]
pids = [SparkContext._gateway.proc.pid]
for pid in pids:  # the JVM's whole process tree (spark-submit execs java, which may fork)
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]) == pid:
                    pids.append(int(p))
            except OSError:
                pass
leaked = []
for pid in pids:
    try:
        if secret.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
            leaked.append(pid)
    except OSError:
        pass
seen = spark.sparkContext.parallelize([0], 1).map(
    lambda _: os.environ.get("AWS_SECRET_ACCESS_KEY")
).collect()
spark.range(5).write.parquet(blob + "/x")
again = spark_session(master="local[1]", blob_uri=blob)  # the running session, for S3 too
conf = again.sparkContext._jsc.hadoopConfiguration()
print(json.dumps({
    "pids": pids,
    "leaked": leaked,
    "task_sees_secret": seen == [secret],
    "executor_env": again.sparkContext.getConf().get("spark.executorEnv.AWS_SECRET_ACCESS_KEY")
    == secret,
    "rows": spark.read.parquet(blob + "/x").count(),
    "endpoint": conf.get("fs.s3a.endpoint"),
}))
"""


@pytest.mark.parametrize("log_level", ["", "warn"], ids=["quiet", "logging"])
def test_the_secret_reaches_executors_but_no_command_line(s3_server: Any, log_level: str) -> None:
    env = {**os.environ, **s3_server.env(), "TIMESHARD_SPARK_LOG_LEVEL": log_level}
    blob = s3_server.uri(f"credentials-{uuid.uuid4().hex[:8]}")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, blob],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["leaked"] == [], found
    assert len(found["pids"]) >= 1, found
    assert found["task_sees_secret"], found
    assert found["executor_env"], found  # what a standalone worker gives its executors
    assert found["rows"] == 5, found
    assert found["endpoint"] == s3_server.endpoint, found
