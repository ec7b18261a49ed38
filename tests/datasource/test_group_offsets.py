"""``GroupOffsetCommitter`` (``sparklog.datasource.group_offsets``): the one writer of a
stream's group offsets, against a real broker."""

from __future__ import annotations

import logging
import socket

import pytest

from sparklog.datasource.group_offsets import (
    GroupOffsetCommitter,
    group_report,
    listener_committer,
    remember,
)
from sparklog.datasource.offsets import StreamOffsets
from sparklog.kafka import admin
from sparklog.kafka.client import ClientSettings, KafkaClient
from sparklog_testkit.processes import BrokerProcess


def _committed(broker: BrokerProcess, group: str) -> dict[tuple[str, int], int]:
    with KafkaClient(broker.bootstrap) as c:
        return admin.committed_offsets(c, group)


def _topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    with KafkaClient(broker.bootstrap) as c:
        admin.create_topic(c, name, partitions, {})


def test_a_position_is_committed_to_the_group(broker: BrokerProcess) -> None:
    _topic(broker, "pos", 2)
    committer = GroupOffsetCommitter("q1", ClientSettings(broker.bootstrap))
    assert committer.commit(StreamOffsets({("pos", 0): 4, ("pos", 1): 9}))
    assert _committed(broker, "q1") == {("pos", 0): 4, ("pos", 1): 9}


def test_an_unchanged_position_is_not_sent_again(broker: BrokerProcess) -> None:
    _topic(broker, "same", 1)
    committer = GroupOffsetCommitter("q2", ClientSettings(broker.bootstrap))
    assert committer.commit(StreamOffsets({("same", 0): 3}))
    with KafkaClient(broker.bootstrap) as c:  # someone else moves the group meanwhile
        admin.commit_offsets(c, "q2", {("same", 0): 1})
    assert committer.commit(StreamOffsets({("same", 0): 3}))
    assert _committed(broker, "q2") == {("same", 0): 1}  # not sent: it had not changed
    assert committer.commit(StreamOffsets({("same", 0): 5}))
    assert _committed(broker, "q2") == {("same", 0): 5}


def test_a_failed_commit_is_logged_and_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    committer = GroupOffsetCommitter("q3", ClientSettings(address))
    with caplog.at_level(logging.WARNING, logger="sparklog"):
        assert not committer.commit(StreamOffsets({("t", 0): 1}))
    [said] = [r.getMessage() for r in caplog.records if r.name.startswith("sparklog")]
    assert "group q3" in said and address in said
    assert committer.committed is None  # tried again with the next position


def test_the_listener_commits_a_secured_group_only_with_remembered_settings() -> None:
    secured = ClientSettings(
        "h:9", security_protocol="SASL_SSL", sasl_username="u", sasl_password="pw"
    )
    report = group_report("sec", secured)
    assert "pw" not in repr(report) and report["security"] == "SASL_SSL"
    assert listener_committer(report) is None  # no credentials here: the source commits
    remember("sec", secured)
    committer = listener_committer(report)
    assert committer is not None and committer.settings.sasl_password == "pw"
    plain = listener_committer(group_report("open", ClientSettings("h:9")))
    assert plain is not None and plain.settings.security_protocol == "PLAINTEXT"
