"""The etcd connection settings (``sparklog.cluster.etcd.EtcdSettings``): what is accepted,
what is refused, and where the password comes from. No etcd needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklog.cluster.etcd import PASSWORD_ENV, EtcdSettings, refusal


@pytest.fixture
def pem(tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    path.write_text("not read until a client is made\n")
    return str(path)


def test_plain_endpoints_need_no_tls() -> None:
    s = EtcdSettings("127.0.0.1:2379,127.0.0.1:2380")
    assert not s.tls
    assert s.addresses == [("127.0.0.1", 2379), ("127.0.0.1", 2380)]
    assert s.where() == "127.0.0.1:2379,127.0.0.1:2380"
    assert s.credentials() is None


def test_a_ca_file_or_https_turns_tls_on(pem: str) -> None:
    assert EtcdSettings("127.0.0.1:2379", ca_file=pem).tls
    assert EtcdSettings("https://127.0.0.1:2379").tls
    assert EtcdSettings("127.0.0.1:2379", ca_file=pem).where() == "https://127.0.0.1:2379"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"cert_file": "PEM"}, "etcd_cert_file and etcd_key_file go together"),
        ({"key_file": "PEM"}, "etcd_cert_file and etcd_key_file go together"),
        ({"user": "u"}, "needs a password"),
        ({"password": "p"}, "an etcd password needs etcd_user"),
        ({"ca_file": "/nonexistent/ca.pem"}, "etcd_ca_file /nonexistent/ca.pem: no such file"),
    ],
)
def test_incomplete_settings_are_refused(pem: str, kw: dict[str, str], message: str) -> None:
    kw = {k: pem if v == "PEM" else v for k, v in kw.items()}
    with pytest.raises(ValueError, match=message):
        EtcdSettings("127.0.0.1:2379", **kw)


def test_tls_files_on_http_endpoints_are_refused(pem: str) -> None:
    with pytest.raises(ValueError, match="are http: a CA or client certificate needs https"):
        EtcdSettings("http://127.0.0.1:2379", ca_file=pem)
    with pytest.raises(ValueError, match="all http or all https"):
        EtcdSettings("http://127.0.0.1:2379,https://127.0.0.1:2380")


def test_the_password_comes_from_its_file_first(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("from-file\nignored\n")
    env = {PASSWORD_ENV: "from-env"}
    s = EtcdSettings.from_options("h:1", user="u", password_file=str(secret), environ=env)
    assert s.password == "from-file"
    assert EtcdSettings.from_options("h:1", user="u", environ=env).password == "from-env"


def test_a_user_without_any_password_is_refused() -> None:
    with pytest.raises(ValueError, match=f"etcd_password_file or the environment variable "
                                         f"{PASSWORD_ENV}"):  # fmt: skip
        EtcdSettings.from_options("h:1", user="u", environ={})


def test_a_missing_password_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="etcd password file .*missing"):
        EtcdSettings.from_options("h:1", user="u", password_file=str(tmp_path / "missing"))


def test_no_user_means_no_password_even_if_the_environment_has_one() -> None:
    s = EtcdSettings.from_options("h:1", environ={PASSWORD_ENV: "x"})
    assert (s.user, s.password) == (None, None)


def test_the_password_is_not_in_the_repr() -> None:
    s = EtcdSettings("h:1", user="u", password="hunter2")
    assert "hunter2" not in repr(s)


def test_an_unreachable_etcd_is_no_refusal() -> None:
    assert refusal(OSError("failed to connect to all addresses: Connection refused")) is None
    assert refusal(TimeoutError()) is None
