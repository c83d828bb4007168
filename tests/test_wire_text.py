"""wire/text.py: U+0000 leaves every string and key, nothing else changes."""

from __future__ import annotations

import json

from gpuwatch.wire.text import without_nul


def test_nul_removed_from_values_keys_and_lists():
    body = json.dumps(
        {
            "name": "NVIDIA\u0000 H200\u0000",
            "errors": {"nv\u0000ml": "lost\u0000"},
            "r": ["a\u0000b", 1.5, None],
        }
    ).encode()
    assert b"\\u0000" in body
    assert json.loads(without_nul(body)) == {
        "name": "NVIDIA H200",
        "errors": {"nvml": "lost"},
        "r": ["ab", 1.5, None],
    }


def test_body_without_nul_is_passed_on_as_it_is():
    body = b'{"a": "x\\\\u0001", "b": 1.10}'
    assert without_nul(body) is body


def test_text_in_text_out():
    assert json.loads(without_nul('{"a": "\\u0000z"}')) == {"a": "z"}
    assert isinstance(without_nul('{"a": "\\u0000z"}'), str)


def test_an_escaped_backslash_before_u0000_is_text_and_stays():
    body = json.dumps({"a": "\\u0000"}).encode()  # the six characters \u0000, not a NUL
    assert json.loads(without_nul(body)) == {"a": "\\u0000"}


def test_not_json_is_left_for_the_validator():
    assert without_nul(b'{"a": "\\u0000", ') == b'{"a": "\\u0000", '
