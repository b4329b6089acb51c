"""Java ``.properties`` text (what Kafka's tools take as ``--command-config``), read as Java reads it.

The rules of ``java.util.Properties.load``: a logical line may go on over natural lines that
end in an odd number of backslashes (the next line's leading white space is dropped); a line
whose first non-blank character is ``#`` or ``!`` is a comment; the key ends at the first
unescaped ``=``, ``:`` or white space, and one ``=``/``:`` with white space around it
separates it from the value; ``\\t \\n \\r \\f``, ``\\uXXXX`` and ``\\`` before any other
character are escapes. A later key replaces an earlier one. Nothing here does I/O.

    >>> parse_properties('# client\\nsecurity.protocol = SASL_SSL\\nsasl.jaas.config: a \\\\\\n   b;\\n')
    {'security.protocol': 'SASL_SSL', 'sasl.jaas.config': 'a b;'}
"""

from __future__ import annotations

from streamkit._core.errors import ConfigError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_BLANK = " \t\f"


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(line number, logical line) of each line that is not blank or a comment."""
    out: list[tuple[int, str]] = []
    parts: list[str] = []
    first = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip(_BLANK)
        if not parts:
            if not line or line[0] in "#!":
                continue
            first = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            parts.append(line[:-1])
            continue
        parts.append(line)
        out.append((first, "".join(parts)))
        parts = []
    if parts:
        out.append((first, "".join(parts)))
    return out


def _unescape(text: str, where: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(f"{where}: malformed \\uXXXX escape")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split(line: str) -> tuple[str, str]:
    """The raw (still escaped) key and value of a logical line."""
    i = 0
    while i < len(line) and line[i] not in "=:" + _BLANK:
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:].lstrip(_BLANK)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANK)
    return key, rest


def parse_properties(text: str, source: str = "properties") -> dict[str, str]:
    """The keys and values of ``text`` in ``.properties`` syntax; ``source`` names it in errors."""
    out: dict[str, str] = {}
    for number, line in _logical_lines(text):
        raw_key, raw_value = _split(line)
        where = f"{source} line {number}"
        out[_unescape(raw_key, where)] = _unescape(raw_value, where)
    return out
