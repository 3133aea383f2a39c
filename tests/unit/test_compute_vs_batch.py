"""benchmarks.compute_vs_batch's flags: bad batch lists are one clear argparse error."""

from __future__ import annotations

import argparse

import pytest

from benchmarks.compute_vs_batch import batch_sizes


def test_batch_list_parses_in_order():
    assert batch_sizes("1,2,4,16") == [1, 2, 4, 16]


@pytest.mark.parametrize("text, says", [("1,x", "whole numbers"), ("0,2", ">= 1"), ("", "whole numbers")])
def test_bad_batch_list_is_refused_naming_the_value(text, says):
    with pytest.raises(argparse.ArgumentTypeError, match=says) as refused:
        batch_sizes(text)
    assert repr(text) in str(refused.value)
