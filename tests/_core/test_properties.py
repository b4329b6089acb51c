"""``parse_properties``: Java's ``.properties`` rules, as Kafka's tools read ``--command-config``."""

from __future__ import annotations

import pytest

from streamkit._core.errors import ConfigError
from streamkit._core.properties import parse_properties


def test_comments_blank_lines_and_the_three_separators() -> None:
    text = "# a comment\n! another\n\n  a=1\nb : 2\nc 3\nd\t=\t4\ne=\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "4", "e": ""}


def test_a_value_keeps_its_inner_separators_and_trailing_space() -> None:
    assert parse_properties("url = a=b:c \nx==y\n") == {"url": "a=b:c ", "x": "=y"}


def test_continuation_lines_drop_the_next_lines_leading_space() -> None:
    text = 'sasl.jaas.config=Module required \\\n    username="u" \\\n\tpassword="p";\nnext=1\n'
    assert parse_properties(text) == {"sasl.jaas.config": 'Module required username="u" password="p";', "next": "1"}


def test_an_even_number_of_backslashes_ends_the_line() -> None:
    assert parse_properties("a=x\\\\\nb=y\n") == {"a": "x\\", "b": "y"}


def test_escapes_in_keys_and_values() -> None:
    assert parse_properties("a\\ b\\=c=\\u0041\\t\\z\n") == {"a b=c": "A\tz"}


def test_a_later_key_replaces_an_earlier_one_and_crlf_is_a_line_end() -> None:
    assert parse_properties("a=1\r\na=2\r\n") == {"a": "2"}


def test_a_malformed_unicode_escape_names_the_line() -> None:
    with pytest.raises(ConfigError, match=r"client.properties line 2: malformed \\uXXXX escape"):
        parse_properties("ok=1\nbad=\\u12\n", "client.properties")
