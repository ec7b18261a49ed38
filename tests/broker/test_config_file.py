"""A broker config file is checked against the settings sparklog has: an unknown table or
key, or a value of the wrong type, stops ``sparklog broker start`` with one line naming the
file, the key and what is allowed (a typo must not silently turn a feature off).

Each case runs the real CLI process, as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparklog.broker.config import BrokerConfig
from sparklog.errors import ConfigFileError


def _start(tmp_path: Path, toml: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    conf = tmp_path / "bad.toml"
    conf.write_text(toml)
    out = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "broker", "start", "--config", str(conf),
         "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return conf, out


def _one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "listening on" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("sparklog: error: ")
    return lines[0]


def test_a_misspelled_table_is_refused_naming_it_and_the_tables_allowed(tmp_path: Path) -> None:
    conf, out = _start(tmp_path, "[securty]\nauthorizer = true\n")
    line = _one_line_error(out)
    assert str(conf) in line and "[securty]" in line
    assert "did you mean [security]" in line
    assert "[broker], [security], [topic_defaults]" in line


def test_a_setting_outside_any_table_is_refused_and_says_where_it_goes(tmp_path: Path) -> None:
    conf, out = _start(tmp_path, 'listen = "127.0.0.1:9092"\n[broker]\nnode_id = 0\n')
    line = _one_line_error(out)
    assert str(conf) in line and "listen" in line and "outside any table" in line
    assert "move it under [broker]" in line


def test_a_value_of_the_wrong_type_names_the_key_the_value_and_the_type(tmp_path: Path) -> None:
    conf, out = _start(tmp_path, '[broker]\nnum_partitions = "three"\n')
    line = _one_line_error(out)
    assert str(conf) in line
    assert '[broker] num_partitions = "three" is a string; expected an integer' in line


def test_an_unknown_key_in_a_known_table_lists_the_keys_allowed(tmp_path: Path) -> None:
    conf, out = _start(tmp_path, "[security]\nauthoriser = true\n")
    line = _one_line_error(out)
    assert str(conf) in line and "[security] authoriser" in line
    assert "did you mean authorizer" in line and "super_users" in line


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (
            "[broker]\nauto_create_topics = 1\n",
            "auto_create_topics = 1 is an integer; expected true or false",
        ),
        (
            "[broker]\nnum_partitions = true\n",
            "num_partitions = true is a boolean; expected an integer",
        ),
        ('[broker]\nlisten = ["127.0.0.1:0", 9093]\n', "expected a string or a list of strings"),
        ("[broker]\nadvertised_host = 1\n", "advertised_host = 1 is an integer; expected a string"),
        ('[security]\nsasl_mechanisms = "PLAIN"\n', "expected a list of strings"),
        ('[topic_defaults]\n"retention.ms" = [1]\n', "expected a string or a number"),
        ("broker = 1\n", "[broker] must be a table"),
        ("[broker.extra]\nx = 1\n", "[broker] extra is not a setting"),
    ],
)
def test_every_table_checks_its_types_from_the_settings_themselves(
    tmp_path: Path, toml: str, expected: str
) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(toml)
    with pytest.raises(ConfigFileError) as e:
        BrokerConfig.load(str(conf))
    assert str(e.value).startswith(f"{conf}: ") and expected in str(e.value)


def test_a_password_of_the_wrong_type_is_not_printed(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text('[security]\ninter_broker_password = ["s3cret"]\n')
    with pytest.raises(ConfigFileError, match="inter_broker_password") as e:
        BrokerConfig.load(str(conf))
    assert "s3cret" not in str(e.value)


def test_a_file_that_is_not_toml_names_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text("[broker\n")
    with pytest.raises(ConfigFileError, match=f"{conf}: not valid TOML"):
        BrokerConfig.load(str(conf))


def test_a_well_formed_file_loads_every_table(tmp_path: Path) -> None:
    conf = tmp_path / "ok.toml"
    conf.write_text(
        '[broker]\nlisten = ["127.0.0.1:0"]\nnum_partitions = 3\nauto_create_topics = false\n'
        '[topic_defaults]\n"retention.ms" = 3600000\n'
        '[security]\nsasl_mechanisms = ["PLAIN"]\nauthorizer = true\n'
    )
    config = BrokerConfig.load(str(conf))
    assert (config.num_partitions, config.auto_create_topics) == (3, False)
    assert config.topic_defaults == {"retention.ms": "3600000"}
    assert config.security.authorizer and config.security.sasl_mechanisms == ("PLAIN",)


def test_the_shipped_example_loads() -> None:
    example = Path(__file__).resolve().parents[2] / "conf" / "broker.toml"
    assert BrokerConfig.load(str(example)).host_port == ("127.0.0.1", 9092)


def test_the_ack_fence_is_no_setting(tmp_path: Path) -> None:
    """Turning off the ack fence (a zombie could acknowledge writes its successor never
    holds) is for measuring what the fence costs only: ``bench/cluster.py`` does it through
    ``bench/_unfenced_broker.py``, so a config file cannot."""
    conf, out = _start(tmp_path, "[broker]\nack_fence = false\n")
    line = _one_line_error(out)
    assert str(conf) in line and "[broker] ack_fence" in line


def test_a_tail_max_chunks_below_one_is_refused_in_one_line(tmp_path: Path) -> None:
    _conf, out = _start(tmp_path, "[broker]\ntail_max_chunks = 0\n")
    line = _one_line_error(out)
    assert "tail_max_chunks must be >= 1, got 0" in line
