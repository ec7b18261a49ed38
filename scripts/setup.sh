#!/usr/bin/env bash
# Sets up a fresh clone: checks Python and Java, creates the venv, installs sparklog[dev].
# Runs with no standard input (CI). Called by `make`; safe to run again.
set -euo pipefail
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "sparklog needs Python 3.11 or newer: '$PYTHON' was not found (set PYTHON=...)." >&2
  exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "sparklog needs Python 3.11 or newer; $PYTHON is $("$PYTHON" --version 2>&1)." >&2
  exit 1
fi
bash "$(dirname "$0")/check-java.sh"

# kcat (a librdkafka command-line client) is one of the real clients the broker tests use.
if ! command -v kcat >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "sparklog: installing kcat (Debian package) for the broker tests"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null
  else
    echo "sparklog: kcat is not installed; the kcat tests will be skipped" \
         "(Debian/Ubuntu: apt-get install kcat)" >&2
  fi
fi

# etcd (Debian's etcd-server) is cluster mode's coordination service; the cluster tests
# start their own members on loopback.
if ! command -v etcd >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "sparklog: installing etcd-server (Debian package) for the cluster tests"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
  else
    echo "sparklog: etcd is not installed; the cluster tests will be skipped" \
         "(Debian/Ubuntu: apt-get install etcd-server)" >&2
  fi
fi

# promtool and prometheus (Debian's prometheus, the only package with promtool) check the
# shipped alert rules and dashboard against a real scrape (tests/broker/test_prometheus.py).
# Only the binaries are used: a systemd machine would start the packaged service, so it is
# stopped and disabled again.
if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "sparklog: installing prometheus (Debian package, for promtool) for the metrics tests"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      prometheus >/dev/null
    if [ -d /run/systemd/system ]; then
      systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
  else
    echo "sparklog: promtool is not installed; the Prometheus tests will be skipped" \
         "(Debian/Ubuntu: apt-get install prometheus)" >&2
  fi
fi

# A C compiler builds sparklog._columns, the produce path's record decoder (setup.py);
# without one the install still works and decodes through aiokafka's codec, slower.
if ! command -v cc >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "sparklog: installing gcc (Debian package) to build sparklog._columns"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null
  else
    echo "sparklog: no C compiler; sparklog._columns is not built and produce decodes" \
         "through aiokafka's codec (Debian/Ubuntu: apt-get install gcc)" >&2
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[dev]"
# The JVM jars (Spark's Kafka connector, delta-spark, Apache Kafka) with Maven: docs/jvm.md.
# Exit 3 means java or mvn is missing outside CI: the tests that need them are skipped.
status=0
"$VENV/bin/python" "$(dirname "$0")/jars.py" || status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 3 ]; then
  exit "$status"
fi
echo "sparklog: environment ready in $VENV"
