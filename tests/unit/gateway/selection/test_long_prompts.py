"""Route selection on long prompts: the bounded reads give the same answers as the whole text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.selection.prompt import DIGIT_SCAN_CHARS, digit_count


def digits_of(text: str) -> int:
    return sum(text.count(digit) for digit in "0123456789")


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=400) | st.text(alphabet="0123456789 abcé世\ud800", max_size=400))
def test_digit_count_counts_the_digits_of_any_text(text: str) -> None:
    assert digit_count(text) == digits_of(text)


@pytest.mark.parametrize("unit", ["ab12", "é1世2", "12345678"])
def test_a_long_texts_digits_are_its_sampled_share(unit: str) -> None:
    text = unit * (DIGIT_SCAN_CHARS // len(unit) * 3)
    half = DIGIT_SCAN_CHARS // 2
    sample = text[:half] + text[-half:]
    assert digit_count(text) == round(digits_of(sample) * len(text) / len(sample))
