"""Fetch the project's JVM jars with Maven: one pom per purpose under ``jvm/<name>/``, its
runtime dependencies copied to ``.jars/<name>/`` (ignored by git, cached in ``~/.m2``), or
under ``$SPARKLOG_JARS`` (``sparklog.jars.jar_dir``).

    python scripts/jars.py [NAME ...]        # default: every jvm/*/pom.xml

For ``spark`` (Spark's Kafka connector and delta-spark), a jar whose artifact pyspark
already ships (``pyspark/jars``: Scala, Hadoop, Jackson, Parquet, logging...) is not kept:
Spark's classpath has one version of each, pyspark's, as ``--packages`` would leave it.
A folder is fetched again only when its pom (or, for ``spark``, pyspark's version) changed:
a stamp holds their hash. Without
``mvn`` it prints what is missing and exits 3, unless ``CI`` is set: then it fails (1), as a
missing jar must never turn into skipped tests in CI.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from sparklog.jars import jar_dir

ROOT = Path(__file__).resolve().parents[1]
JVM = ROOT / "jvm"
STAMP = ".pom-sha256"
VERSIONED = re.compile(r"^(?P<artifact>.+?)-\d[\w.+-]*\.jar$")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def artifact(jar: str) -> str:
    m = VERSIONED.match(jar)
    return m.group("artifact") if m else jar


def pyspark_artifacts() -> set[str]:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return {artifact(j.name) for j in jars.glob("*.jar")}


def run_plain(cmd: list[str]) -> None:
    """Run ``cmd``, passing its output on line by line without terminal escape codes:
    Maven 3.8 writes colour resets even with ``--batch-mode -Dstyle.color=never``, which
    show as ``^[[0m`` in a log or CI output."""
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, errors="replace",
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        plain = ANSI_ESCAPE.sub("", line)
        if plain.strip():
            print(plain, end="", flush=True)
    if proc.wait() != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)


def fetch(name: str) -> Path:
    pom = JVM / name / "pom.xml"
    dest = jar_dir(name)
    key = pom.read_bytes()
    if name == "spark":  # what is kept depends on what pyspark ships
        import pyspark

        key += pyspark.__version__.encode()
    digest = hashlib.sha256(key).hexdigest()
    stamp = dest / STAMP
    if stamp.exists() and stamp.read_text() == digest:
        return dest
    tmp = dest.parent / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [
        "mvn", "-q", "--batch-mode", "-Dstyle.color=never", "-f", str(pom),
        "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={tmp}",
    ]  # fmt: skip
    print(f"sparklog: fetching the {name} jars with Maven ({pom.relative_to(ROOT)})", flush=True)
    run_plain(cmd)
    if name == "spark":
        shipped = pyspark_artifacts()
        for jar in list(tmp.glob("*.jar")):
            if artifact(jar.name) in shipped:
                jar.unlink()
    (tmp / STAMP).write_text(digest)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def main(argv: list[str]) -> int:
    names = argv or sorted(p.parent.name for p in JVM.glob("*/pom.xml"))
    if shutil.which("mvn") is None or shutil.which("java") is None:
        missing = " and ".join(t for t in ("java", "mvn") if shutil.which(t) is None)
        msg = f"sparklog: {missing} not found: the JVM jars ({', '.join(names)}) are not fetched"
        if os.environ.get("CI"):
            print(f"{msg}; CI needs them", file=sys.stderr)
            return 1
        print(f"{msg}; the tests that need them will be skipped", file=sys.stderr)
        return 3
    jar_dir("").mkdir(parents=True, exist_ok=True)
    for name in names:
        dest = fetch(name)
        print(f"sparklog: {len(list(dest.glob('*.jar')))} {name} jars in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
