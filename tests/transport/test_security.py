"""``ClientSecurity``: Kafka's client settings from a mapping, a properties file and the
environment, checked in one line each; what aiokafka is given; secrets never shown."""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

import pytest
from click.testing import CliRunner

from streamkit._core.errors import ConfigError
from streamkit.cli.main import cli
from streamkit.transport.kafka_security import aiokafka_security
from streamkit.transport.security import (
    PLAINTEXT,
    ClientSecurity,
    Secret,
    command_line_security,
    env_name,
    parse_jaas,
)

PASSWORD = "hunter2-Xy9"
SCRAM = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": PASSWORD}
JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{}";'


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    """A CA file Python's ssl loads (the system's bundle, or a made one when there is none)."""
    bundle = Path(ssl.get_default_verify_paths().cafile or "")
    if bundle.is_file():
        return bundle
    from tests.support.secured import make_tls

    return make_tls(tmp_path / "tls").ca


def test_a_sasl_ssl_scram_mapping_gives_aiokafkas_arguments() -> None:
    security = ClientSecurity.from_properties(SCRAM)
    kwargs = security.client_kwargs()
    assert kwargs["security_protocol"] == "SASL_SSL" and kwargs["sasl_mechanism"] == "SCRAM-SHA-256"
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == ("alice", PASSWORD)
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext) and context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert security.describe() == "SASL_SSL SCRAM-SHA-256 as alice"


def test_plaintext_gives_no_arguments_and_the_protocol_is_case_insensitive() -> None:
    assert PLAINTEXT.client_kwargs() == {} and ClientSecurity.from_properties({}) == PLAINTEXT
    assert ClientSecurity.from_properties({"security.protocol": "ssl"}).protocol == "SSL"


def test_the_jaas_config_gives_user_and_password_as_kafka_clients_read_it() -> None:
    security = ClientSecurity.from_properties(
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": JAAS.format(PASSWORD)}
    )
    assert (security.username, security.password) == ("alice", Secret(PASSWORD))
    assert parse_jaas('x.PlainLoginModule required username=bob password="a \\"b\\" c";') == (
        "x.PlainLoginModule", {"username": "bob", "password": 'a "b" c'},
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"sasl.jaas.config": "PlainLoginModule username=x;"}, r"sasl\.jaas\.config: expected '<LoginModule class> required"),
        ({"sasl.jaas.config": 'x.PlainLoginModule required username="a" junk;'}, r"cannot read the login module's options near 'junk'"),
        # an unclosed quote: the option is named, its value (a password) is not shown
        ({"sasl.jaas.config": 'x.PlainLoginModule required username="a" password="pw-Kq7;'},
         r"cannot read the login module's options near 'password=\.\.\.'$"),
        ({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"}, r"login module .*Krb5LoginModule is not read here"),
    ],
)
def test_a_jaas_config_that_cannot_be_read_is_one_error(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ClientSecurity.from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", **settings})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"security.protocol": "SASL_TLS"}, r"^security\.protocol: unknown protocol 'SASL_TLS' \(one of PLAINTEXT, SSL"),
        ({"sasl.mechansim": "PLAIN"}, r"^sasl\.mechansim: unknown client security setting; did you mean 'sasl\.mechanism'\?"),
        ({"ssl.truststore.location": "/x.jks"}, r"^ssl\.truststore\.location: Java key and trust stores are not read: give PEM files"),
        ({"security.protocol": "SASL_SSL"}, r"^sasl\.mechanism: SASL_SSL needs sasl\.mechanism \(PLAIN, SCRAM-SHA-256"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "scram-sha-256"}, r"^sasl\.mechanism: unknown mechanism 'scram-sha-256'"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.password": PASSWORD}, r"^sasl\.username: PLAIN needs a user name"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "a"}, r"^sasl\.password: PLAIN needs a password"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, r"^sasl\.mechanism: OAUTHBEARER needs a token callback, given in Python"),
        ({"sasl.password": PASSWORD}, r"^sasl\.password: is set but security\.protocol is PLAINTEXT \(no SASL\)"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "a", "sasl.password": PASSWORD,
          "ssl.ca.location": "/ca.pem"}, r"^ssl\.ca\.location: is set but security\.protocol is SASL_PLAINTEXT \(no TLS\)"),
        ({"security.protocol": "SSL", "ssl.ca.location": "/no/such/ca.pem"}, r"^ssl\.ca\.location: no such file: /no/such/ca\.pem"),
        ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "http"}, r"must be https or empty, not 'http'"),
        ({"security.protocol": 7}, r"^security\.protocol: must be a string, not int"),
    ],
)
def test_a_bad_setting_is_one_error_naming_it_and_never_the_password(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        ClientSecurity.from_properties(settings)
    assert PASSWORD not in str(caught.value)


def test_an_empty_endpoint_identification_algorithm_turns_hostname_checking_off(ca: Path) -> None:
    security = ClientSecurity.from_properties(
        {"security.protocol": "SSL", "ssl.ca.location": str(ca), "ssl.endpoint.identification.algorithm": ""}
    )
    context = security.tls_context()
    assert not context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    checked = ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "HTTPS"})
    assert checked.tls_context().check_hostname


def test_a_ready_ssl_context_is_used_as_it_is_and_excludes_ssl_files(ca: Path) -> None:
    context = ssl.create_default_context()
    security = ClientSecurity.from_properties({"security.protocol": "SSL"}, ssl_context=context)
    assert security.client_kwargs() == {"security_protocol": "SSL", "ssl_context": context}
    with pytest.raises(ConfigError, match=r"^ssl\.ca\.location: give either an ssl_context or ssl\.\* settings, not both"):
        ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.ca.location": str(ca)}, ssl_context=context)
    with pytest.raises(ConfigError, match=r"PLAINTEXT does not use TLS, yet an ssl_context is given"):
        ClientSecurity.from_properties({}, ssl_context=context)


def test_a_file_that_is_not_a_ca_bundle_is_one_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    security = ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.ca.location": str(junk)})
    with pytest.raises(ConfigError, match=r"^ssl\.ca\.location: cannot load the CA certificates from .*junk\.pem"):
        security.client_kwargs()


def test_oauthbearer_takes_a_token_callback_wrapped_as_aiokafkas_provider() -> None:
    async def token() -> str:
        return "tok-1"

    security = ClientSecurity.from_properties(
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, token_callback=token
    )
    kwargs = aiokafka_security(security)
    assert kwargs["sasl_mechanism"] == "OAUTHBEARER" and "token_callback" not in kwargs
    assert asyncio.run(kwargs["sasl_oauth_token_provider"].token()) == "tok-1"
    plain = ClientSecurity.from_properties(
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"}, token_callback=lambda: "tok-2"
    )
    assert asyncio.run(aiokafka_security(plain)["sasl_oauth_token_provider"].token()) == "tok-2"


def test_gssapi_gives_the_kerberos_arguments() -> None:
    security = ClientSecurity.from_properties(
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI", "sasl.kerberos.service.name": "kfk"},
        kerberos_domain_name="example.com",
    )
    assert security.client_kwargs() == {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI",
        "sasl_kerberos_service_name": "kfk", "sasl_kerberos_domain_name": "example.com",
    }


def test_secrets_never_show_in_repr_str_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    security = ClientSecurity.from_properties(
        {**SCRAM, "sasl.jaas.config": JAAS.format(PASSWORD)}
    )
    assert repr(Secret(PASSWORD)) == str(Secret(PASSWORD)) == "******"
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("connecting with %s / %r / %s", security, security, security.properties)
    for shown in (repr(security), str(security), caplog.text, security.describe()):
        assert PASSWORD not in shown


def test_the_environment_rule_and_its_errors_name_the_variable() -> None:
    assert env_name("sasl.password") == "STREAMKIT_SASL_PASSWORD"
    env = {"STREAMKIT_SECURITY_PROTOCOL": "SASL_SSL", "STREAMKIT_SASL_MECHANISM": "PLAIN",
           "STREAMKIT_SASL_USERNAME": "app", "STREAMKIT_SASL_PASSWORD": PASSWORD, "UNRELATED": "x"}
    security = ClientSecurity.from_environment(env)
    assert (security.protocol, security.username, security.password) == ("SASL_SSL", "app", Secret(PASSWORD))
    with pytest.raises(ConfigError, match=r"^STREAMKIT_SASL_MECHANISM \(environment\): unknown mechanism 'PLAN'"):
        ClientSecurity.from_environment({**env, "STREAMKIT_SASL_MECHANISM": "PLAN"})


def test_a_command_config_file_goes_over_the_environment_name_by_name(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text(f"sasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config={JAAS.format('from-file')}\n")
    env = {"STREAMKIT_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "STREAMKIT_SASL_MECHANISM": "PLAIN",
           "STREAMKIT_SASL_USERNAME": "env-user", "STREAMKIT_SASL_PASSWORD": PASSWORD}
    security = command_line_security(config, env)
    # The file's mechanism wins; sasl.username/sasl.password, given (by the environment), win over the JAAS's.
    assert (security.protocol, security.mechanism, security.username) == ("SASL_PLAINTEXT", "SCRAM-SHA-512", "env-user")
    assert security.password == Secret(PASSWORD)
    assert command_line_security(None, {}) == PLAINTEXT


def test_an_unreadable_or_wrong_command_config_is_one_error_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^cannot read client properties file .*missing\.properties: No such file"):
        command_line_security(tmp_path / "missing.properties", {})
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=a\nsasl.pasword=x\n")
    with pytest.raises(ConfigError, match=rf"^sasl\.pasword \(in {bad}\): unknown client security setting; did you mean 'sasl\.password'\?"):
        command_line_security(bad, {})


def test_the_cli_refuses_a_bad_command_config_in_one_line_and_command_config_without_bootstrap(tmp_path: Path) -> None:
    bad = tmp_path / "client.properties"
    bad.write_text(f"security.protocol=SASL_SSL\nsasl.password={PASSWORD}\n")
    env = {"STREAMKIT_DATA_DIR": None, "STREAMKIT_BOOTSTRAP": None, "STREAMKIT_COMMAND_CONFIG": None}
    result = CliRunner().invoke(cli, ["topics", "list", "--bootstrap", "127.0.0.1:1", "--command-config", str(bad)], env=env)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"streamkit: error: sasl.mechanism (in {bad}): SASL_SSL needs sasl.mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, GSSAPI)"
    ]
    result = CliRunner().invoke(cli, ["topics", "list", "--data-dir", str(tmp_path / "d"), "--command-config", str(bad)], env=env)
    assert result.exit_code == 2 and "--command-config is for a broker: give --bootstrap too" in result.output


def test_docs_security_md_lists_every_setting_with_its_variable_and_its_examples_run() -> None:
    import re

    from streamkit.transport.security import NAMES

    doc = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z.-]+)` \| `(STREAMKIT_[A-Z_]+)` \|", doc, flags=re.M))
    assert sorted(rows) == sorted(NAMES)
    assert all(env_name(name) == variable for name, variable in rows.items())
    for block in re.findall(r"```properties\n(.*?)```", doc, flags=re.S):
        names = {line.split("=", 1)[0] for line in block.splitlines() if line and not line.startswith("#")}
        assert names <= set(NAMES), names
    for block in re.findall(r"```python\n(.*?)```", doc, flags=re.S):
        exec(compile(block, "docs/security.md", "exec"), {"__name__": "docs"})


def test_a_layered_error_names_each_setting_where_it_was_given() -> None:
    base = ClientSecurity.from_properties(SCRAM)
    with pytest.raises(ConfigError, match=r"^sasl\.mechanism \(environment\): is set but security\.protocol is SSL"):
        base.layered({"security.protocol": "SSL"}, label=env_name, source=" (environment)")
    with pytest.raises(ConfigError, match=r"^STREAMKIT_SASL_MECHANISM \(environment\): unknown mechanism 'X'"):
        base.layered({"sasl.mechanism": "X"}, label=env_name, source=" (environment)")
