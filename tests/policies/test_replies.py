"""The generic steps of the strict reply rule (docs/parsing.md), shared by every domain's parser."""
from __future__ import annotations

import pytest

from sepo.games.base import ParseResult
from sepo.policies.replies import TRUNCATED, answer_line


@pytest.mark.parametrize("reply,expected", [
    ("reasoning\n\nANSWER  \n\n", "ANSWER  "),
    ("<think>a\nb</think>\nfirst\nlast", "last"),
    ("<think>a</think> x <think>b</think>\nlast\n", "last"),
    ("<think>\nclosed</think>\n<think>still open\nNOT THIS", ParseResult(TRUNCATED)),
    ("<think>never closed\nNOT THIS", ParseResult(TRUNCATED)),
    ("<think>only reasoning</think>\n \n", ParseResult("no_action")),
    ("", ParseResult("no_action")),
])
def test_answer_line_is_the_last_non_empty_line_after_the_reasoning(reply, expected):
    assert answer_line(reply) == expected
