"""How a backfill carries the app's security to Spark's executors (``spark.access``): the task's
``TaskLog`` pickles as Spark ships a closure (cloudpickle) and prints no secret; Python objects
(an ``ssl.SSLContext``) are taken from the app's module on the other side; a ``--job``'s data
source options carry the password under a name Spark redacts, and refuse what strings cannot
carry."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from streamkit._core.errors import ConfigError
from streamkit.spark.access import log_access
from streamkit.spark.planning import load_app

PASSWORD = "pw-Hx81-never-shown"
APP = '''
import ssl
import streamkit as sk

app = sk.App("secapp", broker="kafka://127.0.0.1:9093", broker_credentials=sk.SASLCredentials(
    username="alice", password="{password}", mechanism="SCRAM-SHA-256", ssl_context=ssl.create_default_context()))
'''


def test_a_task_carries_the_secret_pickled_and_takes_an_ssl_context_from_the_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark import cloudpickle

    (tmp_path / "secapp.py").write_text(APP.format(password=PASSWORD))
    monkeypatch.delitem(sys.modules, "secapp", raising=False)
    app = load_app("secapp:app", str(tmp_path))
    access = log_access(app, "secapp:app", str(tmp_path))
    task = access.task_log()
    assert task.objects_from == ("secapp:app", str(tmp_path))
    assert PASSWORD not in repr(task) and PASSWORD not in str(task)
    monkeypatch.delitem(sys.modules, "secapp")  # as on an executor: the app imported anew
    there = cloudpickle.loads(cloudpickle.dumps(task)).security()
    assert there.password is not None and there.password.reveal() == PASSWORD
    assert there.ssl_context is not None and there.describe() == "SASL_SSL SCRAM-SHA-256 as alice"
    with pytest.raises(ConfigError, match=r"^a --job reads and writes through the data source.*ssl\.SSLContext"):
        access.data_source_options()


def test_a_jobs_options_carry_the_password_under_a_name_spark_redacts(tmp_path: Path) -> None:
    import streamkit as sk

    ca = tmp_path / "ca.pem"
    ca.write_text("not read here")
    app = sk.App("jobapp", broker="kafka://127.0.0.1:9093,127.0.0.1:9094", broker_credentials={
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "ssl.ca.location": str(ca),
        "sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="{PASSWORD}";',
    })
    options = log_access(app, "jobapp:app", None).data_source_options()
    assert options == {
        "bootstrap": "127.0.0.1:9093,127.0.0.1:9094", "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN", "kafka.ssl.ca.location": str(ca), "kafka.sasl.username": "bob",
        "kafka.sasl.password": PASSWORD,
    }
    assert log_access(app, "jobapp:app", None).task_log().objects_from is None  # strings only: nothing to import
