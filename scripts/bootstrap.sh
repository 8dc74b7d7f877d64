# Sourced by scripts/demo.sh and scripts/test.sh: installs what timeshard needs
# (idempotent) and exports the environment PySpark wants on this machine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TIMESHARD_VENV:-$ROOT/.venv}"

# Debian's packages the run needs and lacks, installed with one `apt-get update` and one
# install, while pip installs the Python side (a fresh CI machine waits for both).
packages=()
reasons=()
if ! command -v java >/dev/null 2>&1; then
    packages+=(openjdk-17-jre-headless) reasons+=("a Java runtime for Spark")
fi
if [ "${TIMESHARD_NEED_POSTGRES:-0}" = "1" ] && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
    packages+=(postgresql) reasons+=("PostgreSQL")
fi
if [ "${TIMESHARD_NEED_MARIADB:-0}" = "1" ] && ! command -v mariadbd >/dev/null 2>&1 \
    && ! command -v mysqld >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
    packages+=(mariadb-server) reasons+=("MariaDB (the MYSQL source's tests)")
fi
if [ "${TIMESHARD_NEED_MAVEN:-0}" = "1" ] && ! command -v mvn >/dev/null 2>&1; then
    packages+=(maven) reasons+=("Maven (it fetches the Kafka broker's jars)")
fi
if [ "${TIMESHARD_NEED_CHROMIUM:-0}" = "1" ] && ! command -v chromium >/dev/null 2>&1 \
    && ! command -v chromium-browser >/dev/null 2>&1 \
    && ! command -v chromium-headless-shell >/dev/null 2>&1; then
    packages+=(chromium) reasons+=("Chromium (the dashboard's browser test)")
fi
apt_pid=""
if [ "${#packages[@]}" -gt 0 ]; then
    for reason in "${reasons[@]}"; do
        echo "bootstrap: installing $reason from Debian's packages" >&2
    done
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}") &
    apt_pid=$!
fi
apt_done() {  # waits for the packages (never leaves apt-get running behind a failure)
    if [ -n "$apt_pid" ] && ! wait "$apt_pid"; then
        echo "bootstrap: apt-get could not install: ${packages[*]}" >&2
        return 1
    fi
    apt_pid=""
}
python_done() {
    if [ ! -x "$VENV/bin/python" ]; then
        python3 -m venv "$VENV" && "$VENV/bin/pip" install -q --upgrade pip || return 1
    fi
    local stamp="$VENV/.timeshard-installed"
    if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
        "$VENV/bin/pip" install -q -e "$ROOT[dev]" && touch "$stamp" || return 1
    fi
}
if ! python_done; then
    apt_done || true
    echo "bootstrap: pip could not install timeshard into $VENV" >&2
    exit 1
fi
apt_done
unset -f apt_done python_done

export PATH="$VENV/bin:$PATH"
export SPARK_LOCAL_IP=127.0.0.1
export PYSPARK_PYTHON="$VENV/bin/python"
export PYSPARK_DRIVER_PYTHON="$VENV/bin/python"
