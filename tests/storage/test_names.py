from __future__ import annotations

import pytest

from sparklog.errors import InvalidTopicError
from sparklog.storage import names


def test_segment_name_is_zero_padded_to_20_digits() -> None:
    assert names.segment_name(42) == "00000000000000000042.parquet"


def test_active_segment_name() -> None:
    assert names.segment_name(7, kind="arrow") == "00000000000000000007.arrow"


def test_generation_suffix_keeps_ls_order_by_base_offset() -> None:
    gen2 = names.segment_name(100, generation=2)
    assert gen2 == "00000000000000000100.00002.parquet"
    later = names.segment_name(1000)
    earlier = names.segment_name(99, kind="arrow")
    assert sorted([later, gen2, earlier]) == [earlier, gen2, later]


@pytest.mark.parametrize(
    ("base", "kind", "gen"), [(0, "arrow", 0), (123456789, "parquet", 0), (5, "parquet", 99999)]
)
def test_segment_name_round_trips(base: int, kind: names.SegmentKind, gen: int) -> None:
    parsed = names.parse_segment_name(names.segment_name(base, kind=kind, generation=gen))
    assert parsed == names.SegmentName(base, gen, kind)


@pytest.mark.parametrize(
    "name",
    ["42.parquet", "00000000000000000042.log", "x.parquet", "00000000000000000042.arrow.index"],
)
def test_parse_segment_name_rejects_other_files(name: str) -> None:
    assert names.parse_segment_name(name) is None


def test_index_owner() -> None:
    seg = names.segment_name(3)
    assert names.index_owner(names.offset_index_name(seg)) == seg
    assert names.index_owner(names.time_index_name(seg)) == seg
    assert names.index_owner("foo.index") is None


def test_version_name_round_trips() -> None:
    assert names.version_name(3) == "00000000000000000003.json"
    assert names.parse_version_name(names.version_name(12345)) == 12345
    assert names.parse_version_name("3.json") is None


@pytest.mark.parametrize("name", ["orders", "a.b-c_D9", "x" * 249, "..."])
def test_legal_topic_names(name: str) -> None:
    assert names.validate_topic_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a/b", "../etc", "a\x00b", "x" * 250, "spaced name", "ünïcode", "a\\b"],
)
def test_illegal_topic_names_are_rejected(name: str) -> None:
    with pytest.raises(InvalidTopicError):
        names.validate_topic_name(name)


def test_topic_paths_stay_under_the_root() -> None:
    assert names.partition_dir("/data", "t", 3) == "/data/topics/t/3"
    with pytest.raises(InvalidTopicError):
        names.partition_dir("/data", "..", 0)


def test_negative_partition_is_rejected() -> None:
    with pytest.raises(ValueError, match="partition"):
        names.partition_dir("/data", "t", -1)


def test_transaction_index_name_follows_the_active_segments_epoch() -> None:
    """As the high watermark: the shared name for an unnamed epoch, one per epoch else."""
    assert names.txn_index_file(names.segment_name(0, kind="arrow")) == "transactions.checkpoint"
    epoch_7 = names.txn_index_file(names.segment_name(0, kind="arrow", epoch=7))
    assert epoch_7 == "transactions.e00000000007.checkpoint"


def test_transaction_index_epoch_round_trips() -> None:
    for epoch in (0, 7, 10**11 - 1):
        name = names.txn_index_file(names.segment_name(5, kind="arrow", epoch=epoch))
        assert names.txn_index_epoch(name) == epoch
        assert names.is_txn_index_file(name)
    assert names.txn_index_epoch(names.TXN_INDEX_FILE) is None
    assert names.is_txn_index_file(names.TXN_INDEX_FILE)
    assert not names.is_txn_index_file(names.HIGH_WATERMARK_FILE)


def test_segment_files_are_the_segment_and_its_indexes() -> None:
    seg = names.segment_name(42)
    assert names.segment_files(seg) == (seg, f"{seg}.index", f"{seg}.timeindex")
    assert {names.index_owner(n) for n in names.segment_files(seg)[1:]} == {seg}


def test_root_level_directories() -> None:
    assert names.topic_defaults_dir("/r/") == "/r/topic-defaults"
    assert names.security_dir("/r", "users") == "/r/security/users"
    assert names.security_dir("/r", "acls") == "/r/security/acls"
    with pytest.raises(ValueError, match="unknown security document"):
        names.security_dir("/r", "../x")


def test_manifest_file_is_relative_to_the_partition() -> None:
    name = names.manifest_file(3)
    assert name == "manifest/00000000000000000003.json"
    assert names.parse_version_name(name.rpartition("/")[2]) == 3
