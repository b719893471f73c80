"""Stop sequences and streamed text: never send part of a stop sequence or half a character."""

from qdrift.serve.generation import _cut_at_stop, _held_back


def test_cut_at_the_earliest_stop_sequence():
    assert _cut_at_stop("abc END x STOP", ("STOP", "END")) == ("abc ", True)
    assert _cut_at_stop("abc", ("STOP",)) == ("abc", False)


def test_text_that_may_become_a_stop_sequence_is_held_back():
    assert _held_back("hello ST", ("STOP",)) == 2
    assert _held_back("hello S", ("STOP", "SX")) == 1
    assert _held_back("hello", ("STOP",)) == 0


def test_a_partial_utf8_character_is_held_back():
    assert _held_back("caf\ufffd", ()) == 1
