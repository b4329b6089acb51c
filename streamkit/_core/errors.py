"""The root of streamkit's error hierarchy.

    StreamkitError            every error streamkit raises on purpose
      ConfigError             a bad setting or argument (not retriable)

Each package adds its own subclasses in its ``errors.py``. ``retriable`` tells a caller
whether trying the same operation again may succeed.
"""

from __future__ import annotations


class StreamkitError(Exception):
    """Base class of all streamkit errors."""

    retriable: bool = False


class ConfigError(StreamkitError, ValueError):
    """A setting or argument is invalid."""
