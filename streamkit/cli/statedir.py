"""A worker's state directory as the commands see it: where it is by default, and the URL of
the running worker's HTTP API recorded in it (``streamkit tables`` asks that worker first)."""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streamkit.app.application import App

WEB_FILE = ".web"  # in a worker's state directory: the URL of its HTTP API, while it runs


def default_state_dir(app: App) -> str:
    return os.path.join(".streamkit-state", app.id)


def record_web_url(state_dir: str, url: str) -> None:
    os.makedirs(state_dir, exist_ok=True)
    with open(os.path.join(state_dir, WEB_FILE), "w") as f:
        json.dump({"url": url, "pid": os.getpid()}, f)


def forget_web_url(state_dir: str) -> None:
    with contextlib.suppress(FileNotFoundError):  # never recorded, or already forgotten
        os.unlink(os.path.join(state_dir, WEB_FILE))


def recorded_web_url(state_dir: str) -> str | None:
    try:
        with open(os.path.join(state_dir, WEB_FILE)) as f:
            found = json.load(f)
        os.kill(int(found["pid"]), 0)  # still running?
        return str(found["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
