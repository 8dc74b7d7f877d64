# Sourced by scripts/demo.sh and scripts/test.sh: installs what timeshard needs
# (idempotent) and exports the environment PySpark wants on this machine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TIMESHARD_VENV:-$ROOT/.venv}"

if ! command -v java >/dev/null 2>&1; then
    echo "bootstrap: installing a Java runtime for Spark" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless
fi
if [ "${TIMESHARD_NEED_POSTGRES:-0}" = "1" ] && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
    echo "bootstrap: installing PostgreSQL from Debian's packages" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql
fi
if [ "${TIMESHARD_NEED_MARIADB:-0}" = "1" ] && ! command -v mariadbd >/dev/null 2>&1 \
    && ! command -v mysqld >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
    echo "bootstrap: installing MariaDB from Debian's packages (the MYSQL source's tests)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server
fi
if [ "${TIMESHARD_NEED_MAVEN:-0}" = "1" ] && ! command -v mvn >/dev/null 2>&1; then
    echo "bootstrap: installing Maven from Debian's packages (it fetches the Kafka broker's jars)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven
fi
if [ "${TIMESHARD_NEED_CHROMIUM:-0}" = "1" ] && ! command -v chromium >/dev/null 2>&1 \
    && ! command -v chromium-browser >/dev/null 2>&1 \
    && ! command -v chromium-headless-shell >/dev/null 2>&1; then
    echo "bootstrap: installing Chromium from Debian's packages (the dashboard's browser test)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
fi
STAMP="$VENV/.timeshard-installed"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
    "$VENV/bin/pip" install -q -e "$ROOT[dev]"
    touch "$STAMP"
fi

export PATH="$VENV/bin:$PATH"
export SPARK_LOCAL_IP=127.0.0.1
export PYSPARK_PYTHON="$VENV/bin/python"
export PYSPARK_DRIVER_PYTHON="$VENV/bin/python"
