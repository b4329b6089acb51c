"""Objects a user names as ``module:attribute`` (an app for ``-A``, a backfill's ``--job``, a
data source's ``valueApp``/``valueType``): imported with one clear error for each way it can
fail (not of that form, the module missing or failing while it runs, the attribute absent)."""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import Any

from streamkit._core.errors import ConfigError


def import_ref(ref: str, *, noun: str = "attribute", root: str | None = "") -> Any:
    """The object ``ref`` (``module:attribute``) names. ``root`` goes first on ``sys.path``
    when it is not there (``""``: the current directory, as ``python -m`` has it; ``None``:
    leave the path alone); ``noun`` names the attribute in the error when it is missing."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"expected MODULE:ATTRIBUTE, got {ref!r}")
    if root is not None and root not in sys.path:
        sys.path.insert(0, root)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r}: {exc}") from exc
    except SyntaxError as exc:  # IndentationError included
        where = f"{exc.filename}, line {exc.lineno}" if exc.filename else "its source"
        raise ConfigError(f"cannot import {module_name!r}: {exc.msg} ({where})") from exc
    except Exception as exc:
        # The module itself raised while it ran: name the line of its code that did.
        raise ConfigError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc} ({_raised_at(exc)})") from exc
    found = getattr(module, attr, None)
    if found is None:
        raise ConfigError(f"module {module_name!r} has no {noun} {attr!r}")
    return found


def _raised_at(exc: BaseException) -> str:
    """``FILE, line N`` of the innermost frame of ``exc`` outside Python's import machinery."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen ")]
    if not frames:
        return "while importing"
    return f"{frames[-1].filename}, line {frames[-1].lineno}"
