"""ShareGPT conversations: token counts from the file or characters, vLLM's selection,
one-line errors with the line a conversation starts on, and the assignment to arrivals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from specdec.errors import UserError
from workloads.sharegpt import assign_conversations, read_sharegpt
from workloads.trace_rows import TraceCounts

FILE = Path(__file__).parent / "data" / "sharegpt.json"
STARTS = [2, 9, 18, 25, 32, 39]  # the line of each conversation's '{'


def _chars(i: int, turn: int, cpt: float = 4.0) -> int:
    return math.ceil(len(json.loads(FILE.read_text())[i]["conversations"][turn]["value"]) / cpt)


def test_lengths_from_num_tokens_else_characters():
    rows = read_sharegpt(FILE)
    assert [r.line for r in rows] == STARTS
    assert [(r.prompt_tokens, r.output_tokens) for r in rows] == [
        (_chars(0, 0), _chars(0, 1)), (9, 17), (_chars(2, 0), _chars(2, 1)),
        (_chars(3, 0), _chars(3, 1)), (6, 8), (_chars(5, 0), _chars(5, 1))]
    assert rows[0].prompt_tokens == 9  # 33 characters / 4, rounded up
    assert all(r.at is None and r.hash_ids is None for r in rows)


def test_chars_per_token_is_a_parameter():
    rows = read_sharegpt(FILE, chars_per_token=2.0)
    assert rows[0].prompt_tokens == _chars(0, 0, 2.0) == 17
    assert rows[1].prompt_tokens == 9  # num_tokens wins


def test_vllm_filter_keeps_what_vllm_keeps_and_counts_the_rest(tmp_path):
    counts = TraceCounts()
    rows = read_sharegpt(FILE, vllm_filter=True, counts=counts)
    assert [r.line for r in rows] == [2, 9, 18, 32, 39]  # 'Bonjour.' is 2 tokens < 4
    assert counts.filtered == 1 and counts.rows == 6
    f = tmp_path / "s.json"
    convs = [[{"from": "human", "value": "x" * 4 * 1025}, {"from": "gpt", "value": "y" * 40}],
             [{"from": "human", "value": "x" * 4 * 1000}, {"from": "gpt", "value": "y" * 4 * 1100}],
             [{"from": "gpt", "value": "x" * 40}, {"from": "human", "value": "y" * 40}],
             [{"from": "human", "value": "a lone question"}]]
    f.write_text(json.dumps([{"id": str(i), "conversations": c} for i, c in enumerate(convs)]))
    counts = TraceCounts()
    rows = read_sharegpt(f, vllm_filter=True, counts=counts)
    # too long a prompt (1025), too long in all (1000 + 1100), roles unchecked, one turn
    assert [(r.prompt_tokens, r.output_tokens) for r in rows] == [(10, 10)]
    assert counts.filtered == 3


def _conv(*turns, extra=""):
    body = ", ".join(json.dumps(t) for t in turns)
    return '{"id": "a", "conversations": [' + body + "]" + extra + "}"


H, G = {"from": "human", "value": "hello there"}, {"from": "gpt", "value": "hi"}
BAD = [
    ("", "line 1: expected a JSON list of conversations"),
    ("{}", "line 1: expected a JSON list of conversations"),
    ("[]", "no conversations in the list"),
    ("[\n" + _conv(H, G) + ",\n" + _conv(H, G) + "\n", "line 4: not valid JSON"),  # at the end
    ("[\n" + _conv(H, G) + "\n" + _conv(H, G) + "]", "line 3: not valid JSON: expected ',' or"),
    ("[" + _conv(H, G) + "] x", "line 1: not valid JSON: extra data after the list"),
    ("[\n" + _conv(H, G) + ",\n 7]", "line 3: expected a conversation object, got int"),
    ('[\n{"id": "a"}]', "line 2: conversations: missing field"),
    ('[\n{"conversations": {}}]', "line 2: conversations: must be a list"),
    ("[\n\n" + _conv(H) + "]", "line 3: conversations: 1 turns, need a prompt and a reply"),
    ("[" + _conv(H, "hi") + "]", "line 1: conversations[1]: expected an object"),
    ("[" + _conv(H, {"from": "gpt"}) + "]", "line 1: conversations[1].value: missing field"),
    ("[" + _conv(H, G, {"from": "human", "value": 3}) + "]",
     "line 1: conversations[2].value: not a string: 3"),
    ("[" + _conv(G, H) + "]", "line 1: conversations[0].from: must be one of human, user, "
                              "got 'gpt'"),
    ("[" + _conv(H, {"from": "gpt", "value": ""}) + "]",
     "line 1: conversations[1].value: must be >= 1, got 0 (an empty turn"),
    ("[" + _conv({**H, "num_tokens": -2}, G) + "]",
     "line 1: conversations[0].num_tokens: must be >= 0, got -2"),
    ("[" + _conv({**H, "num_tokens": "12"}, G) + "]",
     "line 1: conversations[0].num_tokens: not an integer: '12'"),
]


@pytest.mark.parametrize(("text", "fragment"), BAD)
def test_malformed_conversations_are_one_line(tmp_path, text, fragment):
    f = tmp_path / "bad.json"
    f.write_text(text)
    with pytest.raises(UserError) as info:
        read_sharegpt(f)
    msg = str(info.value)
    assert msg.startswith(f"{f}: ") and fragment in msg and "\n" not in msg


def test_empty_turns_skipped_when_asked(tmp_path):
    f = tmp_path / "s.json"
    f.write_text("[" + _conv(H, {"from": "gpt", "value": ""}) + ", " + _conv(H, G) + "]")
    counts = TraceCounts()
    assert len(read_sharegpt(f, skip_zero=True, counts=counts)) == 1
    assert counts.zero_skipped == 1


def test_later_turns_are_checked_for_shape_only(tmp_path):
    f = tmp_path / "s.json"
    f.write_text("[" + _conv(H, G, {"from": "human", "value": ""}) + "]")
    assert len(read_sharegpt(f)) == 1  # an empty third turn is not used


def test_assign_takes_conversations_in_seeded_order():
    rows = read_sharegpt(FILE)
    t = np.array([0.5, 1.0, 2.0, 2.5])
    a = assign_conversations(rows, t, np.random.default_rng(4))
    assert [s.arrival_at for s in a] == [0.5, 1.0, 2.0, 2.5]
    assert a == assign_conversations(rows, t, np.random.default_rng(4))
    lengths = {(r.prompt_tokens, r.output_tokens) for r in rows}
    assert len({(s.prompt_tokens, s.output_tokens) for s in a}) == 4
    assert {(s.prompt_tokens, s.output_tokens) for s in a} <= lengths
    plain = assign_conversations(rows, t, np.random.default_rng(4), shuffle=False)
    assert [(s.prompt_tokens, s.output_tokens) for s in plain] == [
        (r.prompt_tokens, r.output_tokens) for r in rows[:4]]
