"""Faust's ``broker_credentials``/``ssl_context`` settings and credential objects, honoured:
they become the app's ``ClientSecurity`` (``app/credentials.py``), with the environment over it."""

from __future__ import annotations

import ssl

import pytest

import streamkit as faust
from streamkit._core.errors import ConfigError
from streamkit.app.credentials import security_of
from streamkit.transport.security import PLAINTEXT, ClientSecurity, Secret

PASSWORD = "pw-Faust-77"


def test_faust_exports_the_credential_classes_at_the_top_level() -> None:
    for name in ("SASLCredentials", "SSLCredentials", "GSSAPICredentials", "OAuthCredentials"):
        assert name in faust.__all__ and getattr(faust, name).__module__ == "streamkit.app.credentials"


def test_sasl_credentials_are_plain_over_plaintext_by_default_and_sasl_ssl_with_a_context() -> None:
    plain = faust.SASLCredentials(username="app", password=PASSWORD)
    assert (plain.protocol, plain.mechanism) == ("SASL_PLAINTEXT", "PLAIN")
    assert plain.security().describe() == "SASL_PLAINTEXT PLAIN as app"
    context = ssl.create_default_context()
    scram = faust.SASLCredentials(username="app", password=PASSWORD, mechanism="SCRAM-SHA-256", ssl_context=context)
    security = scram.security()
    assert (security.protocol, security.mechanism, security.password) == ("SASL_SSL", "SCRAM-SHA-256", Secret(PASSWORD))
    assert security.client_kwargs()["ssl_context"] is context
    assert PASSWORD not in repr(plain) + repr(scram) + repr(security)


def test_the_other_credentials_and_faust_shorthands() -> None:
    context = ssl.create_default_context()
    assert faust.SSLCredentials(context).security().client_kwargs() == {"security_protocol": "SSL", "ssl_context": context}
    gssapi = faust.GSSAPICredentials(kerberos_service_name="kfk", kerberos_domain_name="corp", ssl_context=context).security()
    assert (gssapi.protocol, gssapi.mechanism, gssapi.kerberos_service_name, gssapi.kerberos_domain_name) == (
        "SASL_SSL", "GSSAPI", "kfk", "corp",
    )

    class Tokens:
        async def token(self) -> str:
            return "t"

    oauth = faust.OAuthCredentials(client_id="c", oauth_cb=Tokens()).security()
    assert (oauth.protocol, oauth.mechanism, oauth.token_callback is not None) == ("SASL_PLAINTEXT", "OAUTHBEARER", True)
    assert security_of(context, None).protocol == "SSL"
    assert security_of(("app", PASSWORD), None).describe() == "SASL_PLAINTEXT PLAIN as app"
    assert security_of(None, context).client_kwargs() == {"security_protocol": "SSL", "ssl_context": context}
    assert security_of(None, None) == PLAINTEXT
    mapping = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "a", "sasl.password": PASSWORD}
    assert security_of(mapping, None).describe() == "SASL_SSL PLAIN as a"


def test_the_settings_are_honoured_checked_when_set_and_never_show_the_password() -> None:
    app = faust.App(
        "secure", broker="kafka://127.0.0.1:9093",
        broker_credentials=faust.SASLCredentials(username="app", password=PASSWORD, mechanism="SCRAM-SHA-512",
                                                 ssl_context=ssl.create_default_context()),
    )
    assert app.conf.ineffective() == []
    assert app.conf.client_security({}).describe() == "SASL_SSL SCRAM-SHA-512 as app"
    assert PASSWORD not in repr(app.conf)
    with pytest.raises(ConfigError, match=r"^sasl\.mechanism \(SASLCredentials\): unknown mechanism 'SCRAM'"):
        faust.App("bad", broker_credentials=faust.SASLCredentials(username="a", password="b", mechanism="SCRAM"))
    with pytest.raises(ConfigError, match=r"^setting broker_credentials must be SASLCredentials, .* not int"):
        faust.App("bad", broker_credentials=3)
    with pytest.raises(ConfigError, match=r"^setting ssl_context must be an ssl\.SSLContext, not str"):
        faust.App("bad", ssl_context="cert.pem")


def test_the_environment_goes_over_the_apps_settings_name_by_name() -> None:
    app = faust.App("env", broker_credentials={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                              "sasl.username": "app", "sasl.password": "from-code"})
    security = app.conf.client_security({"STREAMKIT_SASL_PASSWORD": PASSWORD})
    assert (security.username, security.password) == ("app", Secret(PASSWORD))
    assert isinstance(app.conf.client_options().security, ClientSecurity)


def test_a_pair_or_a_mapping_given_as_broker_credentials_never_shows_its_password() -> None:
    pair = faust.App("pair", broker_credentials=("app", PASSWORD))
    assert isinstance(pair.conf.broker_credentials, faust.SASLCredentials)
    mapping = faust.App("mapping", broker_credentials={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                                       "sasl.username": "app", "sasl.password": PASSWORD})
    for app in (pair, mapping):
        assert PASSWORD not in repr(app.conf) + repr(app.conf.broker_credentials)
    assert mapping.conf.client_security({}).password == Secret(PASSWORD)
