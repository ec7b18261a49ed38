"""ClientSettings' connection security, without a broker: Kafka's option names, the JAAS
config, properties files, validation, and what ``repr`` hides. (Against a secured broker:
tests/kafka/test_client_security_broker.py.)"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from sparklog.kafka.client import ClientSettings, parse_jaas_config, parse_properties, ssl_context
from sparklog.kafka.security_admin import Acl, salted_password

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
    'password="s3cret";'
)


def test_default_is_plaintext() -> None:
    s = ClientSettings.from_options({"kafka.bootstrap.servers": "h:1"})
    assert (s.security_protocol, s.tls, s.sasl) == ("PLAINTEXT", False, False)
    assert s.principal == "User:ANONYMOUS"


def test_sasl_plain_from_jaas_config() -> None:
    s = ClientSettings.from_options({
        "kafka.bootstrap.servers": "h:1",
        "kafka.security.protocol": "sasl_plaintext",
        "kafka.sasl.jaas.config": PLAIN_JAAS,
    })  # fmt: skip
    assert (s.security_protocol, s.sasl_mechanism) == ("SASL_PLAINTEXT", "PLAIN")
    assert (s.sasl_username, s.sasl_password) == ("alice", "s3cret")
    assert s.principal == "User:alice"


def test_option_names_are_case_insensitive_and_prefix_optional() -> None:
    s = ClientSettings.from_options({
        "Bootstrap.Servers": "h:1", "SECURITY.PROTOCOL": "SASL_SSL",
        "Kafka.SASL.Mechanism": "scram-sha-512", "sasl.username": "bob",
        "sasl.password": "pw", "ssl.ca.location": "/ca.pem",
    })  # fmt: skip
    assert (s.sasl_mechanism, s.sasl_username, s.ssl_cafile) == ("SCRAM-SHA-512", "bob", "/ca.pem")


def test_scram_jaas_config_with_escaped_quotes() -> None:
    s = ClientSettings.from_options({
        "bootstrap.servers": "h:1", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required\n"
                            '  username="carol" password="a\\"b\\\\c" ;',
    })  # fmt: skip
    assert (s.sasl_username, s.sasl_password) == ("carol", 'a"b\\c')


def test_scram_jaas_config_needs_a_mechanism() -> None:
    jaas = PLAIN_JAAS.replace("plain.PlainLoginModule", "scram.ScramLoginModule")
    with pytest.raises(ValueError, match="SCRAM-SHA-256 or SCRAM-SHA-512"):
        ClientSettings.from_options({"bootstrap.servers": "h:1",
                                     "security.protocol": "SASL_PLAINTEXT",
                                     "sasl.jaas.config": jaas})  # fmt: skip


def test_jaas_module_must_fit_the_mechanism() -> None:
    with pytest.raises(ValueError, match="does not do sasl.mechanism SCRAM-SHA-256"):
        ClientSettings.from_options({"bootstrap.servers": "h:1",
                                     "security.protocol": "SASL_PLAINTEXT",
                                     "sasl.mechanism": "SCRAM-SHA-256",
                                     "sasl.jaas.config": PLAIN_JAAS})  # fmt: skip


def test_parse_jaas_config_unquoted_values_and_errors() -> None:
    module, values = parse_jaas_config("a.b.C optional username=u password=p;")
    assert (module, values) == ("a.b.C", {"username": "u", "password": "p"})
    with pytest.raises(ValueError, match="end with ';'"):
        parse_jaas_config('a.b.C required username="u"')
    with pytest.raises(ValueError) as e:
        parse_jaas_config('a.b.C username="u" password="hunter2";')  # no control flag
    assert "hunter2" not in str(e.value)


def test_unsupported_login_module() -> None:
    with pytest.raises(ValueError, match="not supported"):
        ClientSettings.from_options({
            "bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT",
            "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;",
        })  # fmt: skip


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"security.protocol": "TLS"}, "unknown security protocol"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.username": "u",
          "sasl.password": "p"}, "unknown SASL mechanism"),
        ({"security.protocol": "SASL_SSL"}, "needs a SASL user name and password"),
        ({"security.protocol": "SSL", "ssl.truststore.location": "/t.jks"},
         "ssl.truststore.type JKS is not supported.*PEM"),
        ({"security.protocol": "SSL", "ssl.truststore.location": "/t.p12",
          "ssl.truststore.type": "PKCS12"}, "PKCS12 is not supported"),
        ({"security.protocol": "SSL", "ssl.keystore.location": "/k.jks"}, "keystore.type JKS"),
        ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "x"},
         "must be https or empty"),
        ({"security.protocol": "SSL", "ssl.key.location": "/k.pem"}, "needs its certificate"),
    ],
)  # fmt: skip
def test_bad_options_are_clear_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClientSettings.from_options({"bootstrap.servers": "h:1", **options})


def test_pem_truststore_keystore_and_hostname_check() -> None:
    s = ClientSettings.from_options({
        "bootstrap.servers": "h:1", "security.protocol": "SSL",
        "ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "pem",
        "ssl.keystore.location": "/me.pem", "ssl.keystore.type": "PEM",
        "ssl.key.password": "kp", "ssl.endpoint.identification.algorithm": "",
    })  # fmt: skip
    assert (s.ssl_cafile, s.ssl_certfile, s.ssl_keyfile) == ("/ca.pem", "/me.pem", None)
    assert s.ssl_key_password == "kp" and s.ssl_check_hostname is False
    librdkafka = ClientSettings.from_options({
        "bootstrap.servers": "h:1", "security.protocol": "SSL",
        "ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem",
    })  # fmt: skip
    assert (librdkafka.ssl_certfile, librdkafka.ssl_keyfile) == ("/c.pem", "/k.pem")
    assert librdkafka.ssl_check_hostname is True


def test_options_the_protocol_does_not_use_are_ignored() -> None:
    s = ClientSettings.from_options({"bootstrap.servers": "h:1", "sasl.jaas.config": PLAIN_JAAS,
                                     "ssl.ca.location": "/ca.pem"})  # fmt: skip
    assert (s.sasl_username, s.ssl_cafile) == (None, None)


def test_direct_construction_validates() -> None:
    with pytest.raises(ValueError, match="does not use SASL"):
        ClientSettings("h:1", sasl_username="u", sasl_password="p")
    with pytest.raises(ValueError, match="does not use TLS"):
        ClientSettings("h:1", security_protocol="SASL_PLAINTEXT", sasl_username="u",
                       sasl_password="p", ssl_cafile="/ca.pem")  # fmt: skip


def test_repr_hides_passwords() -> None:
    s = ClientSettings("h:1", security_protocol="SASL_SSL", sasl_username="alice",
                       sasl_password="hunter2", ssl_certfile="/c.pem",
                       ssl_key_password="keypw")  # fmt: skip
    assert "hunter2" not in repr(s) and "keypw" not in repr(s)
    assert "alice" in repr(s)


def test_other_addresses_and_timeouts_keep_security() -> None:
    s = ClientSettings("h:1", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256",
                       sasl_username="u", sasl_password="p", ssl_cafile="/ca.pem")  # fmt: skip
    other = s.with_bootstrap("leader:2").with_timeout(5)
    assert (other.bootstrap, other.timeout_s) == ("leader:2", 5)
    assert other == ClientSettings("leader:2", 5, security_protocol="SASL_SSL",
                                   sasl_mechanism="SCRAM-SHA-256", sasl_username="u",
                                   sasl_password="p", ssl_cafile="/ca.pem")  # fmt: skip
    assert pickle.loads(pickle.dumps(s)) == s  # plain data: Spark pickles it to executors


def test_parse_properties() -> None:
    text = (
        "# a comment\n! another\n\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism : SCRAM-SHA-512\n"
        "ssl.truststore.location /etc/ca.pem\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="admin" \\\n'
        '    password="p=w:d";\n'
        "empty=\n"
        "path=C:\\\\dir\\ttab\n"
    )
    props = parse_properties(text)
    assert props["security.protocol"] == "SASL_SSL"
    assert props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["ssl.truststore.location"] == "/etc/ca.pem"
    assert props["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="admin" password="p=w:d";'
    )
    assert props["empty"] == ""
    assert props["path"] == "C:\\dir\ttab"
    s = ClientSettings.from_options({**props, "bootstrap.servers": "h:1",
                                     "ssl.truststore.type": "PEM"})  # fmt: skip
    assert (s.sasl_username, s.sasl_password) == ("admin", "p=w:d")


def test_acl_values_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown operation"):
        Acl("TOPIC", "t", "LITERAL", "User:a", "*", "READ_ALL", "ALLOW")
    with pytest.raises(ValueError, match="TYPE:NAME"):
        Acl("TOPIC", "t", "LITERAL", "alice", "*", "READ", "ALLOW")
    assert "TOPIC:LITERAL:t ALLOW User:a READ" in str(
        Acl("TOPIC", "t", "LITERAL", "User:a", "*", "READ", "ALLOW")
    )


def test_salted_password_is_rfc_5802_hi() -> None:
    # RFC 7677's SCRAM-SHA-256 example: SaltedPassword for "pencil"
    import base64
    import hashlib
    import hmac

    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = salted_password("SCRAM-SHA-256", "pencil", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored = hashlib.sha256(client_key).digest()
    assert base64.b64encode(stored) == b"WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="


def test_ssl_context_checks_the_host_name_unless_disabled(tmp_path: Path) -> None:
    import trustme

    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    options = {"bootstrap.servers": "h:1", "security.protocol": "SSL",
               "ssl.ca.location": str(tmp_path / "ca.pem")}  # fmt: skip
    assert ssl_context(ClientSettings.from_options(options)).check_hostname is True
    off = {**options, "ssl.endpoint.identification.algorithm": ""}
    assert ssl_context(ClientSettings.from_options(off)).check_hostname is False
    with pytest.raises(ValueError, match="cannot load the TLS files"):
        ssl_context(ClientSettings.from_options({**options, "ssl.ca.location": "/nope.pem"}))
