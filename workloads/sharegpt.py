"""ShareGPT-style conversations as request lengths (the file has no arrival times).

A ShareGPT file is a JSON list of conversations, each
``{"id": ..., "conversations": [{"from": "human", "value": text}, {"from": "gpt", ...}, ...]}``
(the ``ShareGPT_V3_unfiltered_cleaned_split.json`` that vLLM's benchmarks use). Each
conversation gives one request, as vLLM's ``ShareGPTDataset.sample``
(``vllm/benchmarks/datasets/sharegpt.py``) does: the first turn is the prompt, the second
the output; later turns are not used. A turn's token count is its ``num_tokens`` field
when it has one (an integer >= 0, written by tokenizing preprocessors), else
``ceil(len(value) / chars_per_token)`` characters-per-token (default 4, OpenAI's rule of
thumb for English text). Other keys of a conversation or a turn are not read.

Without ``vllm_filter`` every conversation must hold at least two turns, the first from
``human`` (or ``user``), the second from ``gpt`` (or ``assistant``), and every length is
kept. With it, conversations are selected exactly as vLLM's sampler selects them: those
with fewer than two turns are left out, roles are not checked, and a pair is kept only
when ``is_valid_sequence`` (``vllm/benchmarks/datasets/utils.py``) accepts it: prompt and
output >= 4 tokens, prompt <= 1024, prompt + output <= 2048. Left-out conversations are
counted (``TraceCounts.filtered``).

Arrivals come from the workload (vLLM's ``benchmark_serving`` sends them at
``--request-rate`` with gamma gaps of shape ``--burstiness``, 1 = Poisson); the order in
which conversations are taken is shuffled with the run's seed by default, as vLLM does
(``random.shuffle`` with its ``--seed``). vLLM's extra step of rescaling the cumulative
gaps to exactly n / rate is not copied.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from specdec.errors import KeyGivenTwice, UserError, unique_keys
from workloads.requests import DEFAULT_TASK, RequestSpec, check_task_weights
from workloads.trace_rows import TraceCounts, TraceRow, token_count

HUMAN = ("human", "user")
MODEL = ("gpt", "assistant")
VLLM_MIN_TOKENS, VLLM_MAX_PROMPT, VLLM_MAX_TOTAL = 4, 1024, 2048  # is_valid_sequence


def _entries(p: Path, text: str):
    """(start line, parsed entry) of each item of the top-level JSON list."""
    dec = json.JSONDecoder(object_pairs_hook=unique_keys)  # a key given twice: refused
    ws = " \t\r\n"
    pos, line, seen = 0, 1, 0

    def skip(i: int) -> int:
        while i < len(text) and text[i] in ws:
            i += 1
        return i

    def bad(e: json.JSONDecodeError):
        return UserError(f"{p}: line {e.lineno}: not valid JSON: {e.msg} (column {e.colno})")

    pos = skip(pos)
    if not text.startswith("[", pos):
        raise UserError(f"{p}: line {1 + text.count(chr(10), 0, pos)}: expected a JSON list "
                        "of conversations")
    pos = skip(pos + 1)
    if text.startswith("]", pos):
        raise UserError(f"{p}: no conversations in the list")
    while True:
        line += text.count("\n", seen, pos)
        seen = pos
        try:
            obj, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise bad(e) from None
        except KeyGivenTwice as e:  # json would keep the last one, silently
            raise UserError(f"{p}: line {line}: {e.key}: given twice") from None
        except RecursionError:  # json recurses once per level
            raise UserError(f"{p}: line {line}: nested too deeply") from None
        yield line, obj
        pos = skip(pos)
        if text.startswith("]", pos):
            break
        if not text.startswith(",", pos):
            raise bad(json.JSONDecodeError("expected ',' or ']'", text, pos))
        pos = skip(pos + 1)
    if skip(pos + 1) != len(text):
        raise bad(json.JSONDecodeError("extra data after the list", text, skip(pos + 1)))


def _check_turn(p: Path, line: int, where: str, turn) -> None:
    if not isinstance(turn, dict):
        raise UserError(f"{p}: line {line}: {where}: expected an object with 'from' and "
                        "'value'")
    for key in ("from", "value"):
        if not isinstance(turn.get(key), str):
            got = "missing field" if key not in turn else f"not a string: {turn[key]!r}"
            raise UserError(f"{p}: line {line}: {where}.{key}: {got}")


def _tokens(p: Path, line: int, where: str, turn: dict, chars_per_token: float,
            skip_zero: bool) -> int:
    """A turn's token count (0 for an empty one when ``skip_zero``)."""
    if "num_tokens" in turn:
        n = token_count(p, line, f"{where}.num_tokens", turn["num_tokens"], skip_zero)
    else:
        n = token_count(p, line, f"{where}.value", math.ceil(len(turn["value"]) /
                                                             chars_per_token), skip_zero,
                        "an empty turn; zero_tokens: skip leaves such conversations out")
    return n or 0


def read_sharegpt(path: str | Path, chars_per_token: float = 4.0, vllm_filter: bool = False,
                  skip_zero: bool = False, counts: TraceCounts | None = None) -> list[TraceRow]:
    """One row per usable conversation (rules in the module docstring), ``at`` None;
    ``line`` is the line where the conversation starts. Errors name that line and the turn
    (``conversations[1].value``)."""
    p, counts = Path(path), counts if counts is not None else TraceCounts()
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as e:
        raise UserError(f"{p}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{p}: cannot read: not UTF-8 text (byte {e.start})") from None
    out = []
    for line, entry in _entries(p, text.removeprefix("\ufeff")):
        counts.rows += 1
        if not isinstance(entry, dict):
            raise UserError(f"{p}: line {line}: expected a conversation object, got "
                            f"{type(entry).__name__}")
        turns = entry.get("conversations")
        if not isinstance(turns, list):
            got = "missing field" if "conversations" not in entry else "must be a list"
            raise UserError(f"{p}: line {line}: conversations: {got}")
        if len(turns) < 2 and vllm_filter:
            counts.filtered += 1
            continue
        if len(turns) < 2:
            raise UserError(f"{p}: line {line}: conversations: {len(turns)} turns, need a "
                            "prompt and a reply (vllm_filter: true leaves such out, as vLLM)")
        for i, turn in enumerate(turns):
            _check_turn(p, line, f"conversations[{i}]", turn)
        if not vllm_filter:
            for i, roles in ((0, HUMAN), (1, MODEL)):
                if turns[i]["from"] not in roles:
                    raise UserError(f"{p}: line {line}: conversations[{i}].from: must be one "
                                    f"of {', '.join(roles)}, got {turns[i]['from']!r}")
        skip = skip_zero or vllm_filter
        prompt, output = (_tokens(p, line, f"conversations[{i}]", turns[i], chars_per_token,
                                  skip) for i in (0, 1))
        if vllm_filter:
            if (prompt < VLLM_MIN_TOKENS or output < VLLM_MIN_TOKENS
                    or prompt > VLLM_MAX_PROMPT or prompt + output > VLLM_MAX_TOTAL):
                counts.filtered += 1
                continue
        elif not (prompt and output):
            counts.zero_skipped += 1
            continue
        out.append(TraceRow(line, None, prompt, output))
    return out


def assign_conversations(rows: list[TraceRow], arrival_at: np.ndarray, rng: np.random.Generator,
                         shuffle: bool = True,
                         tasks: Mapping[str, float] | None = None) -> list[RequestSpec]:
    """Requests at ``arrival_at`` (sorted seconds, at most ``len(rows)`` of them) taking the
    conversations in shuffled (or file) order. Two generators are spawned from ``rng``:
    the order, then the tasks."""
    order_rng, task_rng = rng.spawn(2)
    count = len(arrival_at)
    if count > len(rows):
        raise ValueError(f"{count} arrivals for {len(rows)} conversations")
    order = order_rng.permutation(len(rows))[:count] if shuffle else np.arange(count)  # [N]
    names, task_idx = [DEFAULT_TASK], np.zeros(count, dtype=np.int64)
    if tasks is not None:
        names, p = check_task_weights(tasks)
        task_idx = task_rng.choice(len(names), size=count, p=p)  # [N]
    return [RequestSpec(i, float(t), rows[j].prompt_tokens, rows[j].output_tokens, names[k])
            for i, (t, j, k) in enumerate(zip(arrival_at, order, task_idx, strict=True))]
