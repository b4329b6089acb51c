"""The broker's user credentials: SCRAM credentials per user and mechanism, in one file.

Stored as Kafka stores SCRAM credentials (``scram.py``): salt, StoredKey, ServerKey and the
iteration count per mechanism, never the password. SASL/PLAIN has no store of its own: a
PLAIN password is checked by deriving the user's SCRAM-SHA-512 (else SCRAM-SHA-256)
credential from it with the stored salt and iterations and comparing StoredKeys. One store
means one place to add, change and delete a user, and PLAIN is as strong as SCRAM's
storage; the cost is one PBKDF2 run per PLAIN login (run off the event loop).

File ``<data dir>/.broker/credentials.json``::

    {"version": 1, "sha256": "<hex of the canonical JSON of users>",
     "users": {"alice": {"SCRAM-SHA-256": {"salt": b64, "stored_key": b64,
                                             "server_key": b64, "iterations": 8192}}}}

Written to a temporary file, fsynced, renamed over the old one and the directory fsynced, so
a crash leaves the old file or the new one. A file that does not parse, or whose checksum does
not match, is ``CredentialStoreError``: the broker refuses to start rather than serve users
from a damaged file. ``CredentialStore`` does blocking I/O in ``load``/``save`` only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from streamkit.log.partition import fsync_dir
from streamkit.log.server.errors import CredentialStoreError
from streamkit.log.server.scram import (
    MECHANISMS,
    SHA_256,
    SHA_512,
    ScramCredential,
    ScramMechanism,
    make_credential,
    password_matches,
)

FILE_NAME = "credentials.json"
FORMAT_VERSION = 1
MAX_USER_NAME_CHARS = 256


def store_path(data_dir: Path) -> Path:
    return data_dir / ".broker" / FILE_NAME


def check_user_name(name: str) -> None:
    if not name or len(name) > MAX_USER_NAME_CHARS or not name.isprintable():
        raise ValueError(f"a user name must be 1-{MAX_USER_NAME_CHARS} printable characters")


def _canonical(users: dict[str, Any]) -> bytes:
    return json.dumps(users, sort_keys=True, separators=(",", ":")).encode()


class CredentialStore:
    """Users and their SCRAM credentials; ``load`` reads the file, ``save`` replaces it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._users: dict[str, dict[str, ScramCredential]] = {}

    @classmethod
    def for_data_dir(cls, data_dir: Path) -> CredentialStore:
        return cls(store_path(data_dir))

    def load(self) -> CredentialStore:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            self._users = {}
            return self
        except OSError as exc:
            raise CredentialStoreError(f"cannot read the credential file {self.path}: {exc.strerror}") from exc
        self._users = _parse(raw, self.path)
        return self

    def save(self) -> None:
        users = {
            name: {mech: _encode(cred) for mech, cred in sorted(creds.items())}
            for name, creds in sorted(self._users.items())
        }
        body = {"version": FORMAT_VERSION, "sha256": hashlib.sha256(_canonical(users)).hexdigest(), "users": users}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(FILE_NAME + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(json.dumps(body, indent=1, sort_keys=True).encode())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            fsync_dir(self.path.parent)
        except OSError as exc:
            raise CredentialStoreError(f"cannot write the credential file {self.path}: {exc.strerror}") from exc

    # -- queries -----------------------------------------------------------------------------

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {name: dict(creds) for name, creds in sorted(self._users.items())}

    def credentials_for(self, mechanism: ScramMechanism) -> dict[str, ScramCredential]:
        """user -> credential of ``mechanism`` (what a SCRAM exchange looks up)."""
        return {name: creds[mechanism.name] for name, creds in self._users.items() if mechanism.name in creds}

    def check_plain(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s (blocking: one PBKDF2 run)."""
        creds = self._users.get(user, {})
        for mechanism in (SHA_512, SHA_256):
            credential = creds.get(mechanism.name)
            if credential is not None:
                return password_matches(mechanism, credential, password)
        return False

    # -- changes (call ``save`` after) -------------------------------------------------------

    def upsert(self, user: str, mechanism: ScramMechanism, credential: ScramCredential) -> None:
        check_user_name(user)
        self._users.setdefault(user, {})[mechanism.name] = credential

    def set_password(self, user: str, password: str, iterations: int, mechanisms: tuple[ScramMechanism, ...]) -> None:
        for mechanism in mechanisms:
            self.upsert(user, mechanism, make_credential(mechanism, password, iterations))

    def delete(self, user: str, mechanism: ScramMechanism | None = None) -> bool:
        """Remove one mechanism's credential (all with None); whether there was any."""
        creds = self._users.get(user)
        if creds is None:
            return False
        if mechanism is None:
            del self._users[user]
            return True
        found = creds.pop(mechanism.name, None) is not None
        if not creds:
            del self._users[user]
        return found


def _encode(cred: ScramCredential) -> dict[str, Any]:
    return {
        "salt": base64.b64encode(cred.salt).decode(),
        "stored_key": base64.b64encode(cred.stored_key).decode(),
        "server_key": base64.b64encode(cred.server_key).decode(),
        "iterations": cred.iterations,
    }


def _parse(raw: bytes, path: Path) -> dict[str, dict[str, ScramCredential]]:
    damaged = f"the credential file {path} is damaged"
    try:
        body = json.loads(raw)
        users = body["users"]
        if body.get("version") != FORMAT_VERSION or not isinstance(users, dict):
            raise CredentialStoreError(f"{damaged} (unknown format)")
        if body.get("sha256") != hashlib.sha256(_canonical(users)).hexdigest():
            raise CredentialStoreError(f"{damaged} (checksum mismatch)")
        out: dict[str, dict[str, ScramCredential]] = {}
        for name, creds in users.items():
            out[name] = {}
            for mech, c in creds.items():
                if mech not in MECHANISMS or not isinstance(c["iterations"], int):
                    raise CredentialStoreError(f"{damaged} (bad entry for one user)")
                out[name][mech] = ScramCredential(
                    salt=base64.b64decode(c["salt"], validate=True),
                    stored_key=base64.b64decode(c["stored_key"], validate=True),
                    server_key=base64.b64decode(c["server_key"], validate=True),
                    iterations=c["iterations"],
                )
        return out
    except CredentialStoreError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
        raise CredentialStoreError(f"{damaged} (not readable JSON of credentials)") from exc
