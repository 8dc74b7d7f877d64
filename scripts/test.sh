#!/usr/bin/env bash
# Set up timeshard (first run only; PostgreSQL, MariaDB, Maven, Chromium) and run every test tier.
export TIMESHARD_NEED_POSTGRES=1
export TIMESHARD_NEED_MARIADB=1
export TIMESHARD_NEED_MAVEN=1
export TIMESHARD_NEED_CHROMIUM=1
source "$(dirname "$0")/bootstrap.sh"
cd "$ROOT"
set +e
# Two workers (pytest-xdist), each running whole files with its own SparkSession and
# servers: a Spark test leaves a core idle much of the time (planning, py4j round trips,
# waiting on a server), which the other worker fills. Files go out in collection order
# (faults, integration, then the quick unit tests that even out the end), not xdist's
# default of the files with the most tests first, which left the longest single tests
# (the nemesis run) to the end. `-n 0` after this runs in one process.
python -m pytest -n "${TIMESHARD_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
status=$?
if [ "$status" -eq 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure" >&2
    exit 1
fi
exit "$status"
