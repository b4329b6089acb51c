"""``streamkit users``: the password prompt (the subprocess tests are in
``tests/log/server/test_broker_security.py``)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from streamkit.cli.users import users
from streamkit.log.server.credentials import CredentialStore


def test_users_add_asks_for_the_password_twice_without_echoing_it(tmp_path: Path) -> None:
    runner = CliRunner()
    data_dir = str(tmp_path / "data")
    mismatch = runner.invoke(users, ["add", "eve", "--data-dir", data_dir], input="eve-pw-1\nother\neve-pw-1\neve-pw-1\n")
    assert mismatch.exit_code == 0, mismatch.output
    assert "eve-pw-1" not in mismatch.output and "do not match" in mismatch.output
    assert CredentialStore.for_data_dir(tmp_path / "data").load().check_plain("eve", "eve-pw-1")
    bad = runner.invoke(users, ["add", "", "--data-dir", data_dir], input="x\nx\n")
    assert bad.exit_code == 2 and "user name must be" in bad.output
