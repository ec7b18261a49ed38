"""The history checker finds each anomaly it names, and passes a clean history."""

from __future__ import annotations

from sparklog.demo.checker import History, check


def clean() -> History:
    h = History()
    for i in range(6):
        h.sends.append(("p", f"k{i % 2}", i))
        h.acked[i] = (0, i)
        h.reads.append(("c", 0, i, i))
    return h


def test_a_clean_history_passes() -> None:
    r = check(clean())
    assert r.valid and r.ok == 6 and r.read == 6, r.summary()


def test_an_acked_value_never_read_is_lost() -> None:
    h = clean()
    h.reads = [x for x in h.reads if x[3] != 5]
    assert check(h).anomalies == {"lost": 1}


def test_a_value_at_two_offsets_is_a_duplicate() -> None:
    h = clean()
    h.reads.append(("c", 0, 6, 3))
    r = check(h)
    assert r.anomalies["duplicate"] == 1 and r.anomalies["inconsistent"] == 1


def test_a_value_read_at_another_offset_than_acked_is_inconsistent() -> None:
    h = clean()
    h.acked[5] = (0, 7)
    assert check(h).anomalies == {"inconsistent": 1}


def test_two_values_at_one_offset_are_inconsistent() -> None:
    h = clean()
    h.reads.append(("d", 0, 1, 99))
    assert check(h).anomalies["inconsistent"] == 1


def test_reading_backwards_is_nonmonotonic_and_jumping_over_data_is_skipped() -> None:
    h = clean()
    h.reads.append(("c", 0, 2, 2))
    h.reads += [("d", 0, 0, 0), ("d", 0, 4, 4)]
    r = check(h)
    assert r.anomalies == {"nonmonotonic": 1, "skipped": 1}


def test_a_later_send_stored_before_an_earlier_one_of_its_key_is_reordered() -> None:
    h = clean()
    h.acked[0], h.acked[2] = (0, 2), (0, 0)
    h.reads = [("c", 0, 0, 2), ("c", 0, 1, 1), ("c", 0, 2, 0), *h.reads[3:]]
    assert check(h).anomalies == {"reordered": 1}


def test_failed_sends_are_unknown_not_anomalies() -> None:
    h = clean()
    h.sends.append(("p", "k0", 100))
    h.failed.add(100)
    r = check(h)
    assert r.valid and r.unknown == 1
