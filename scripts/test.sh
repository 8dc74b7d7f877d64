#!/usr/bin/env bash
# Set up timeshard (first run only; PostgreSQL, MariaDB, Maven, Chromium) and run every test tier.
export TIMESHARD_NEED_POSTGRES=1
export TIMESHARD_NEED_MARIADB=1
export TIMESHARD_NEED_MAVEN=1
export TIMESHARD_NEED_CHROMIUM=1
source "$(dirname "$0")/bootstrap.sh"
cd "$ROOT"
set +e
python -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure" >&2
    exit 1
fi
exit "$status"
