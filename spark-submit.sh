#!/usr/bin/env bash
# Run a sparklog job, or your own PySpark script, with the venv's Spark,
# conf/spark-defaults.conf and sparklog's jars and session conf.
#
#   ./spark-submit.sh [SPARK-SUBMIT OPTIONS...] JOB [JOB ARGS...]
#   ./spark-submit.sh [SPARK-SUBMIT OPTIONS...] path/to/script.py [SCRIPT ARGS...]
#
# JOB is a file jobs/JOB.py (demo, retention, compaction, export); a path to an existing
# .py file runs that script as spark-submit does. Options before JOB go to spark-submit
# unchanged, e.g. `./spark-submit.sh --master yarn --num-executors 4 compaction --topic t`,
# so the same jobs run on a cluster.
#
# Exit status (docs/cli.md, sparklog/cli/exits.py): the job's; 2 (USAGE) with no job, an
# unknown one or an option without its value; 1 (FAILED) without Spark or a usable Java.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
VENV=${VENV:-$here/.venv}
bash "$here/scripts/check-java.sh"
if [ ! -x "$VENV/bin/spark-submit" ]; then
  echo "spark-submit.sh: no Spark in $VENV; run 'make setup' first." >&2
  exit 1
fi

# spark-submit options that take no value; every other --option takes one.
novalue=" --verbose --supervise --version --help -h -v "
spark_args=()
while [ $# -gt 0 ] && [[ "$1" == -* ]]; do
  if [[ "$novalue" == *" $1 "* ]] || [[ "$1" == *=* ]]; then
    spark_args+=("$1"); shift
  else
    [ $# -ge 2 ] || { echo "spark-submit.sh: option $1 needs a value" >&2; exit 2; }
    spark_args+=("$1" "$2"); shift 2
  fi
done
jobs_list() {
  echo "jobs: $(cd "$here/jobs" && ls *.py | grep -v '^_' | sed 's/\.py$//' | tr '\n' ' ')" >&2
}
if [ $# -eq 0 ]; then
  echo "usage: ./spark-submit.sh [SPARK-SUBMIT OPTIONS...] JOB|SCRIPT.py [ARGS...]" >&2
  jobs_list
  exit 2
fi
job=$1; shift
if [[ "$job" == *.py || "$job" == */* ]]; then
  # a script of one's own: a path, as spark-submit takes it
  if [ ! -f "$job" ]; then
    echo "spark-submit.sh: no such script '$job'" >&2
    exit 2
  fi
  app=$(cd "$(dirname "$job")" && pwd)/$(basename "$job")
elif [ -f "$here/jobs/$job.py" ]; then
  app=$here/jobs/$job.py
else
  echo "spark-submit.sh: unknown job '$job' (not in jobs/, and not a path to a .py script)" >&2
  jobs_list
  exit 2
fi

export PYSPARK_PYTHON=${PYSPARK_PYTHON:-$VENV/bin/python}
export PYSPARK_DRIVER_PYTHON=${PYSPARK_DRIVER_PYTHON:-$VENV/bin/python}
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
export SPARK_CONF_DIR=${SPARK_CONF_DIR:-$here/conf}
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
# Spark's Kafka connector and delta-spark, fetched by `make setup` (docs/jvm.md): --jars and
# delta-spark's session conf (sparklog.jars.spark_submit_args); a --jars or --conf among the
# options above wins.
mapfile -t jars < <(PYTHONPATH="$here" "$VENV/bin/python" -m sparklog.jars)
exec "$VENV/bin/spark-submit" --properties-file "$SPARK_CONF_DIR/spark-defaults.conf" \
  "${jars[@]}" "${spark_args[@]}" "$app" "$@"
