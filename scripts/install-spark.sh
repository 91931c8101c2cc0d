#!/usr/bin/env bash
# Installs Apache Spark for the Spark experiment (bench/e2e/run spark): the
# JVM from Debian and the pyspark package from PyPI, which ships a whole
# Spark (bin/, sbin/, jars/), in its own virtual environment so nothing of
# the system's Python changes. Safe to run again. Prints SPARK_HOME.
#   FLOWTUNE_SPARK_VENV  where (default /opt/flowtune-spark)
#   FLOWTUNE_PYSPARK     the pip requirement (default pyspark==4.3.0)
set -euo pipefail

venv=${FLOWTUNE_SPARK_VENV:-/opt/flowtune-spark}
req=${FLOWTUNE_PYSPARK:-pyspark==4.3.0}

need=()
# Spark 4 needs Java 17 or later.
java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1; }
major=$(command -v java > /dev/null && java_major || true)
if [ -z "$major" ] || [ "$major" -lt 17 ]; then
  need+=(openjdk-17-jre-headless)
fi
python3 -c "import venv, ensurepip" 2> /dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-spark: missing packages: ${need[*]} (run as root)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" > /dev/null
fi
major=$(java_major)
if [ -z "$major" ] || [ "$major" -lt 17 ]; then
  echo "install-spark: 'java' is version ${major:-unknown}; Spark 4 needs 17 or later" \
    "(set it with update-alternatives --config java)" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import pyspark" 2> /dev/null; then
  echo "install-spark: installing $req into $venv (about 500 MB)" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check "$req" >&2
fi
"$venv/bin/python" -c "import os, pyspark; print(os.path.dirname(pyspark.__file__))"
