"""Secrets never print, and scrubbing one out of a message leaves the rest of it readable."""

import pytest

from qdrift.backends.credentials import REDACTED, Secret, scrub


def test_a_long_key_is_scrubbed_wherever_it_occurs():
    key = Secret("sk-live-0123456789")
    assert scrub("401: bad key sk-live-0123456789 (Bearer sk-live-0123456789x)", key) == \
        f"401: bad key {REDACTED} (Bearer {REDACTED}x)"


@pytest.mark.parametrize("short", ["a", "ab", "table", "key-1"])
def test_a_short_key_is_scrubbed_where_it_stands_alone_without_mangling_other_words(short):
    text = "unauthorized: key {} rejected; words holding it stay whole: x{}, {}x, {}_y, y-{}"
    assert scrub(text.format(*[short] * 5), Secret(short)) == text.format(REDACTED, *[short] * 4)


def test_a_secret_never_prints():
    assert "hunter2" not in repr(Secret("hunter2")) and "hunter2" not in str(Secret("hunter2"))
