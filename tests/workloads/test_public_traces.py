"""Public trace readers: each test file reads back exactly, and every kind of malformed row
is refused in one line naming the file, the line and the field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from specdec.errors import UserError
from workloads.public_traces import FORMATS, azure_time_ns, read_azure, read_burstgpt, read_mooncake
from workloads.trace_rows import TraceCounts

DATA = Path(__file__).parent / "data"
SHIPPED = Path(__file__).parents[2] / "workloads" / "traces" / "mooncake-synthetic.jsonl"


def test_mooncake_rows_are_the_file():
    rows = list(read_mooncake(DATA / "mooncake.jsonl"))
    want = [json.loads(t) for t in (DATA / "mooncake.jsonl").read_text().splitlines()]
    assert [r.line for r in rows] == list(range(1, 13))
    assert [(r.at, r.prompt_tokens, r.output_tokens, list(r.hash_ids)) for r in rows] == [
        (w["timestamp"], w["input_length"], w["output_length"], w["hash_ids"]) for w in want]
    assert FORMATS["mooncake"].units_per_s == 1000


def test_mooncake_block_size_is_checked_and_settable(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 1000, "output_length": 3, '
                 '"hash_ids": [1, 2, 3, 4]}\n')
    with pytest.raises(UserError, match=r"line 1: hash_ids: 4 ids for input_length 1000, "
                                        r"expected ceil\(1000 / 512\) = 2"):
        list(read_mooncake(f))
    assert list(read_mooncake(f, hash_block_tokens=256))[0].hash_ids == (1, 2, 3, 4)


def test_azure_2023_and_2024_times_are_exact():
    rows = list(read_azure(DATA / "azure2023.csv"))
    assert [r.line for r in rows] == list(range(2, 13))
    t0 = rows[0].at
    assert [(r.at - t0) / 10**9 for r in rows] == [
        0.0, 0.5, 0.5, 680_590_000 / 10**9, 1.25, 2.125, 3.0, 4.625, 5.75, 6.0, 7.875]
    assert [(r.prompt_tokens, r.output_tokens) for r in rows][:3] == [(374, 44), (396, 109),
                                                                        (879, 37)]
    rows = list(read_azure(DATA / "azure2024.csv"))
    t0 = rows[0].at
    # 2024 rows carry a UTC offset; 02:00:01.5+02:00 is 00:00:01.5 UTC
    assert [(r.at - t0) / 10**9 for r in rows] == [
        0.0, 262_500_000 / 10**9, 262_500_000 / 10**9, 1.25, 1.75, 2.5, 4.15625, 5.125]
    assert rows[4].prompt_tokens == 805 and rows[4].output_tokens == 9


@pytest.mark.parametrize(("text", "ns"), [
    ("1970-01-01 00:00:00", 0),
    ("1970-01-01 00:00:01.5", 1_500_000_000),
    ("1970-01-01T00:00:00.000000001Z", 1),
    ("1970-01-01 01:00:00+01:00", 0),
    ("1969-12-31 23:00:00-01:00", 0),
    ("2023-11-16 18:15:46.6805900", 1_700_158_546_680_590_000),
])
def test_azure_time_ns(text, ns):
    assert azure_time_ns(text) == ns


@pytest.mark.parametrize("text", ["2023-13-01 00:00:00", "2023-11-16", "2023-11-16 24:00:00",
                                  "2023-11-16 18:15:46.1234567890", "yesterday"])
def test_azure_time_ns_refuses(text):
    assert azure_time_ns(text) is None


def test_burstgpt_failures_are_an_error_unless_skipped_and_counted():
    with pytest.raises(UserError, match=r"burstgpt\.csv: line 4: Response tokens: must be "
                                        r">= 1, got 0 \(a failed request"):
        list(read_burstgpt(DATA / "burstgpt.csv"))
    counts = TraceCounts()
    rows = list(read_burstgpt(DATA / "burstgpt.csv", skip_zero=True, counts=counts))
    assert counts.rows == 12 and counts.zero_skipped == 1 and len(rows) == 11
    assert [r.line for r in rows] == [2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    assert [r.at for r in rows][:4] == [5, 45, 118, 190]
    assert (rows[0].prompt_tokens, rows[0].output_tokens) == (472, 18)
    assert counts.first_at == 5


def test_burstgpt_model_and_log_type_filters_count_what_they_leave_out():
    counts = TraceCounts()
    rows = list(read_burstgpt(DATA / "burstgpt.csv", skip_zero=True, counts=counts,
                              models=("GPT-4",)))
    assert [r.line for r in rows] == [6, 9, 12]
    assert counts.filtered == 8 and counts.zero_skipped == 1
    rows = list(read_burstgpt(DATA / "burstgpt.csv", skip_zero=True,
                              models=("ChatGPT",), log_types=("API log",)))
    assert [r.line for r in rows] == [5, 10, 13]


MOONCAKE_OK = '{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [0]}\n'
BAD_MOONCAKE = [
    ("", "empty file"),
    (MOONCAKE_OK + "\n", "line 2: empty line"),
    (MOONCAKE_OK + '{"timestamp": 5, "input_length": 10,\n', "line 2: not valid JSON"),
    ("[1, 2]\n", "line 1: expected a JSON object, got list"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 3}\n', "line 1: hash_ids: missing"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [0], "x": 1}\n',
     "line 1: x: unknown field"),
    ('{"timestamp": "0", "input_length": 10, "output_length": 3, "hash_ids": [0]}\n',
     "line 1: timestamp: not a finite number: '0'"),
    ('{"timestamp": NaN, "input_length": 10, "output_length": 3, "hash_ids": [0]}\n',
     "line 1: timestamp: not a finite number: nan"),
    ('{"timestamp": 9, "input_length": 10, "output_length": 3, "hash_ids": [0]}\n' + MOONCAKE_OK,
     "line 2: timestamp: times must not decrease, got 0 after 9"),
    ('{"timestamp": 0, "input_length": 12.5, "output_length": 3, "hash_ids": [0]}\n',
     "line 1: input_length: not an integer: 12.5"),
    ('{"timestamp": 0, "input_length": true, "output_length": 3, "hash_ids": [0]}\n',
     "line 1: input_length: not an integer: True"),
    ('{"timestamp": 0, "input_length": 10, "output_length": -3, "hash_ids": [0]}\n',
     "line 1: output_length: must be >= 0, got -3"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 0, "hash_ids": [0]}\n',
     "line 1: output_length: must be >= 1, got 0"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [-1]}\n',
     "line 1: hash_ids: must be a list of integers >= 0"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": 7}\n',
     "line 1: hash_ids: must be a list of integers >= 0"),
]

AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZURE_OK = "2023-11-16 18:15:46.6805900,10,3\n"
BAD_AZURE = [
    ("", "empty file"),
    (AZURE_HEAD, "no requests after the header"),
    ("TIMESTAMP,ContextTokens\n" + "2023-11-16 18:15:46,1\n", "line 1: missing column "
                                                               "'GeneratedTokens'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens,Extra\n", "line 1: unknown column 'Extra'"),
    (AZURE_HEAD + AZURE_OK + "16/11/2023 18:15,10,3\n",
     "line 3: TIMESTAMP: not a time like '2023-11-16 18:15:46.6805900': '16/11/2023 18:15'"),
    (AZURE_HEAD + AZURE_OK + "2023-11-16 18:15:45.0,10,3\n",
     "line 3: TIMESTAMP: times must not decrease, got 2023-11-16 18:15:45.0 after "
     "2023-11-16 18:15:46.6805900"),
    (AZURE_HEAD + "2023-11-16 18:15:46,,3\n", "line 2: ContextTokens: missing value"),
    (AZURE_HEAD + "2023-11-16 18:15:46,1e3,3\n", "line 2: ContextTokens: not an integer: '1e3'"),
    (AZURE_HEAD + "2023-11-16 18:15:46,1_000,3\n",
     "line 2: ContextTokens: not an integer: '1_000'"),
    (AZURE_HEAD + "2023-11-16 18:15:46,10,-1\n", "line 2: GeneratedTokens: must be >= 0"),
    (AZURE_HEAD + "2023-11-16 18:15:46,0,3\n", "line 2: ContextTokens: must be >= 1, got 0"),
    (AZURE_HEAD + AZURE_OK + "2023-11-16 18:15:47,10\n", "line 3: 2 cells for 3 columns"),
]

BURST_HEAD = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
BAD_BURSTGPT = [
    ("Timestamp,Model,Request tokens,Response tokens,Log Type\n",
     "line 1: missing column 'Total tokens'"),
    (BURST_HEAD + "5,ChatGPT,10,3,13,API log\n4,ChatGPT,10,3,13,API log\n",
     "line 3: Timestamp: times must not decrease, got 4 after 5"),
    (BURST_HEAD + "soon,ChatGPT,10,3,13,API log\n", "line 2: Timestamp: not a number: 'soon'"),
    (BURST_HEAD + "inf,ChatGPT,10,3,13,API log\n", "line 2: Timestamp: not finite: 'inf'"),
    (BURST_HEAD + "5,ChatGPT,10,3.5,13.5,API log\n",
     "line 2: Response tokens: not an integer: '3.5'"),
    (BURST_HEAD + "5,ChatGPT,10,3,14,API log\n",
     "line 2: Total tokens: 14 is not Request tokens + Response tokens (10 + 3)"),
    (BURST_HEAD + "5,ChatGPT,0,3,3,API log\n", "line 2: Request tokens: must be >= 1, got 0"),
    (BURST_HEAD + '5,ChatGPT,10,3,13,"API log\n', "line 2: not valid CSV: unexpected end"),
    (BURST_HEAD + "5,ChatGPT,10,3,13\n", "line 2: 5 cells for 6 columns"),
]


@pytest.mark.parametrize(("read", "text", "fragment"),
                         [(read_mooncake, t, f) for t, f in BAD_MOONCAKE]
                         + [(read_azure, t, f) for t, f in BAD_AZURE]
                         + [(read_burstgpt, t, f) for t, f in BAD_BURSTGPT])
def test_a_malformed_row_is_one_line_naming_file_line_and_field(tmp_path, read, text,
                                                                  fragment):
    f = tmp_path / "bad.trace"
    f.write_text(text)
    with pytest.raises(UserError) as info:
        list(read(f))
    msg = str(info.value)
    assert msg.startswith(f"{f}: ")
    assert fragment in msg
    assert "\n" not in msg


@pytest.mark.parametrize(("read", "first"), [(read_mooncake, MOONCAKE_OK),
                                             (read_azure, AZURE_HEAD),
                                             (read_burstgpt, BURST_HEAD)])
def test_missing_and_non_utf8_files(tmp_path, read, first):
    with pytest.raises(UserError, match="cannot read: No such file"):
        list(read(tmp_path / "nope"))
    f = tmp_path / "bad"
    f.write_bytes(first.encode() + b"\xff\xfe\n")
    with pytest.raises(UserError, match=r"bad: line 2: cannot read: not UTF-8 text"):
        list(read(f))


def test_zero_length_rows_are_skipped_only_when_asked_and_counted(tmp_path):
    f = tmp_path / "z.csv"
    f.write_text(AZURE_HEAD + "2023-11-16 18:15:46,10,3\n2023-11-16 18:15:47,10,0\n"
                 "2023-11-16 18:15:48,7,2\n")
    counts = TraceCounts()
    rows = list(read_azure(f, skip_zero=True, counts=counts))
    assert [r.line for r in rows] == [2, 4]
    assert (counts.rows, counts.zero_skipped) == (3, 1)


def test_reading_stops_when_the_consumer_stops(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(MOONCAKE_OK * 3 + "not json\n")
    rows = read_mooncake(f)
    assert [next(rows).line for _ in range(3)] == [1, 2, 3]  # line 4 is never read


def synthetic_mooncake(seed: int = 0, n: int = 300, rate_per_s: float = 4.0,
                       sessions: int = 30, block: int = 512) -> list[dict]:
    """The made-up trace shipped as workloads/traces/mooncake-synthetic.jsonl.

    Poisson arrivals (ms); ``sessions`` conversations whose prompts start with a shared
    2-block system prompt (hash ids 0, 1) and the full blocks of the session's previous
    prompt, then lognormal new user tokens (median 300); a session restarts from the
    system prompt when its prompt would pass 5120 tokens. Outputs lognormal, median 120.
    """
    rng = np.random.default_rng(seed)
    gaps_ms = rng.exponential(1000 / rate_per_s, n - 1)
    at_ms = np.round(np.concatenate([[0.0], np.cumsum(gaps_ms)])).astype(int)  # [n]
    user = np.clip(np.ceil(rng.lognormal(math.log(300), 0.8, n)), 16, 2000).astype(int)
    out = np.clip(np.ceil(rng.lognormal(math.log(120), 0.7, n)), 1, 1024).astype(int)
    who = rng.integers(sessions, size=n)
    system = [0, 1]
    prefix = {s: list(system) for s in range(sessions)}
    next_id, lines = 2, []
    for t, u, o, s in zip(at_ms, user, out, who, strict=True):
        ids = prefix[s] if len(prefix[s]) * block + u <= 5120 else list(system)
        prompt = len(ids) * block + int(u)
        fresh = -(-prompt // block) - len(ids)
        ids = ids + list(range(next_id, next_id + fresh))
        next_id += fresh
        prefix[s] = ids[: prompt // block]  # the partial last block is not shared
        lines.append({"timestamp": int(t), "input_length": prompt, "output_length": int(o),
                      "hash_ids": ids})
    return lines


def test_the_shipped_synthetic_trace_is_what_its_generator_writes():
    text = "".join(json.dumps(d) + "\n" for d in synthetic_mooncake())
    assert SHIPPED.read_text() == text
    rows = list(read_mooncake(SHIPPED))
    assert len(rows) == 300
    assert max(r.prompt_tokens + r.output_tokens for r in rows) <= 5120 + 1024
    assert sum(r.hash_ids[:2] == (0, 1) for r in rows) == 300  # all share the system prompt


def test_a_json_string_is_not_a_length(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": "10", "output_length": 3, "hash_ids": [0]}\n')
    with pytest.raises(UserError, match="line 1: input_length: not an integer: '10'"):
        list(read_mooncake(f))
