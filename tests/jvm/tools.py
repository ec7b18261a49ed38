"""Running Apache Kafka's own command-line tools (Kafka 4.3.1, from the Maven-fetched
``.jars/kafka``) against a broker: ``kafka_tool(MAIN_CLASS, *args)``."""

from __future__ import annotations

import shutil
import subprocess

from sparklog.jars import kafka_classpath

TOOLS = "org.apache.kafka.tools."
TOPIC_COMMAND = TOOLS + "TopicCommand"
CONSOLE_PRODUCER = TOOLS + "ConsoleProducer"
CONSOLE_CONSUMER = TOOLS + "consumer.ConsoleConsumer"
GROUP_COMMAND = TOOLS + "consumer.group.ConsumerGroupCommand"
GET_OFFSET_SHELL = TOOLS + "GetOffsetShell"
DELETE_RECORDS = TOOLS + "DeleteRecordsCommand"
VERIFIABLE_PRODUCER = TOOLS + "VerifiableProducer"
VERIFIABLE_CONSUMER = TOOLS + "VerifiableConsumer"
CONFIG_COMMAND = "kafka.admin.ConfigCommand"


def kafka_tool(
    main: str, *args: str, stdin: str | None = None, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``main`` with ``args`` in a JVM; with ``check``, a non-zero exit fails the test
    with the tool's output."""
    java = shutil.which("java") or "java"
    proc = subprocess.run(
        [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", kafka_classpath(), main, *args],
        input=stdin, capture_output=True, text=True, timeout=timeout,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )  # fmt: skip
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{main.rsplit('.', 1)[-1]} {' '.join(args)} exited {proc.returncode}:\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc
