"""Readers for public request traces with timestamps: Mooncake, Azure LLM inference, BurstGPT.

Each reader streams its file and yields one ``workloads.trace_rows.TraceRow`` per
request, in file order, after checking the row: a malformed one is refused with one line
naming the file, the line and the field (``trace.jsonl: line 7: input_length: not an
integer: 12.5``). Every row must have integer lengths >= 0 and a timestamp no earlier than
the row before it. A length of 0 is refused too, unless the caller asks to skip such rows
(``skip_zero``); skipped rows are counted in ``TraceCounts``. Times stay in the file's own
unit (see ``FORMATS``) so that differences are exact; :mod:`workloads.trace_replay` turns
rows into requests.

Formats (the mapping to ``RequestSpec``: arrival, prompt tokens, output tokens):

- **Mooncake** JSONL (kvcache-ai/Mooncake, ``FAST25-release/README.md`` and the traces in
  ``FAST25-release/traces/``; ``mooncake_trace.jsonl`` at the repository root): one JSON
  object a line with exactly the keys ``timestamp`` (arrival, milliseconds since the
  trace's first request), ``input_length`` (prompt tokens), ``output_length`` (output
  tokens) and ``hash_ids`` (the prompt's remapped block hashes, integers >= 0; requests
  that share a prefix share its leading ids). One id covers 512 tokens, the last one a
  partial block: every line of the published traces has ``ceil(input_length / 512)`` ids
  (NVIDIA Dynamo's ``benchmarks/data_generator/README.md`` states the 512-token block),
  and the reader checks that count (``hash_block_tokens`` sets another block size).
- **Azure** LLM inference traces 2023 and 2024 CSV (Azure/AzurePublicDataset,
  ``AzureLLMInferenceDataset2023.md`` and ``AzureLLMInferenceDataset2024.md``): columns
  ``TIMESTAMP`` (invocation time: ``2023-11-16 18:15:46.6805900`` in 2023,
  ``2024-05-10 00:00:00.009930+00:00`` in 2024; fractions of up to 9 digits and a UTC
  offset are read exactly, into integer nanoseconds), ``ContextTokens`` (prompt) and
  ``GeneratedTokens`` (output).
- **BurstGPT** CSV (HPMLL/BurstGPT, ``README.md``, "Schema"): columns ``Timestamp``
  (seconds from 0:00:00 on the first day), ``Model`` (``ChatGPT`` or ``GPT-4``), ``Request
  tokens`` (prompt), ``Response tokens`` (output), ``Total tokens`` (checked to be their
  sum) and ``Log Type`` (``Conversation log`` or ``API log``). Rows with 0 response tokens
  are the trace's failed requests (``BurstGPT_without_fails_*.csv`` leaves them out): an
  error unless ``skip_zero``. ``models`` / ``log_types`` keep only rows with those values
  (vLLM's ``BurstGPTDataset`` keeps GPT-4 rows with a response).

Reading stops when the consumer stops asking, so a window at the start of a large trace
does not read the rest of it (nor check it).
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from specdec.errors import KeyGivenTwice, UserError, unique_keys
from workloads.trace_rows import TraceCounts, TraceRow, cell_count, csv_rows, lines, token_count

MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
MOONCAKE_BLOCK_TOKENS = 512
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens",
                    "Log Type")


def _ordered(path: Path, line: int, field: str, at, prev) -> None:
    if prev is not None and at < prev:
        raise UserError(f"{path}: line {line}: {field}: times must not decrease, got {at} "
                        f"after {prev}")


def read_mooncake(path: str | Path, skip_zero: bool = False, counts: TraceCounts | None = None,
                  hash_block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> Iterator[TraceRow]:
    """Rows of a Mooncake JSONL trace (format in the module docstring); ``at`` in ms."""
    p, counts = Path(path), counts if counts is not None else TraceCounts()
    prev = None
    for line, text in enumerate(lines(p), start=1):
        if not text.strip():
            raise UserError(f"{p}: line {line}: empty line (expected one JSON object)")
        try:
            obj = json.loads(text, object_pairs_hook=unique_keys)
        except json.JSONDecodeError as e:
            raise UserError(f"{p}: line {line}: not valid JSON: {e.msg} (column "
                            f"{e.colno})") from None
        except KeyGivenTwice as e:
            raise UserError(f"{p}: line {line}: {e.key}: given twice") from None
        except RecursionError:  # json recurses once per level
            raise UserError(f"{p}: line {line}: nested too deeply") from None
        if not isinstance(obj, dict):
            raise UserError(f"{p}: line {line}: expected a JSON object, got "
                            f"{type(obj).__name__}")
        for key in obj:
            if key not in MOONCAKE_KEYS:
                raise UserError(f"{p}: line {line}: {key}: unknown field (expected "
                                f"{', '.join(MOONCAKE_KEYS)})")
        for key in MOONCAKE_KEYS:
            if key not in obj:
                raise UserError(f"{p}: line {line}: {key}: missing field")
        at = obj["timestamp"]
        if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
            raise UserError(f"{p}: line {line}: timestamp: not a finite number: {at!r}")
        _ordered(p, line, "timestamp", at, prev)
        prev = at
        counts.rows += 1
        counts.first_at = at if counts.first_at is None else counts.first_at
        prompt = token_count(p, line, "input_length", obj["input_length"], skip_zero)
        output = token_count(p, line, "output_length", obj["output_length"], skip_zero)
        ids = obj["hash_ids"]
        if not isinstance(ids, list) or any(
                isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in ids):
            raise UserError(f"{p}: line {line}: hash_ids: must be a list of integers >= 0")
        if prompt is None or output is None:
            counts.zero_skipped += 1
            continue
        blocks = -(-prompt // hash_block_tokens)
        if len(ids) != blocks:
            raise UserError(
                f"{p}: line {line}: hash_ids: {len(ids)} ids for input_length {prompt}, "
                f"expected ceil({prompt} / {hash_block_tokens}) = {blocks}")
        yield TraceRow(line, at, prompt, output, tuple(ids), hash_block_tokens)
    if counts.rows == 0:
        raise UserError(f"{p}: empty file (expected one JSON object per line)")


_AZURE_TIME = re.compile(r"(\d{4}-\d\d-\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?"
                         r"(Z|[+-]\d\d:?\d\d)?")
_EPOCH = datetime.date(1970, 1, 1).toordinal()
_DAYS: dict[str, int | None] = {}  # date text -> days since the epoch (None: no such date)


def _days(date: str) -> int | None:
    if date not in _DAYS:
        try:
            _DAYS[date] = datetime.date.fromisoformat(date).toordinal() - _EPOCH
        except ValueError:
            _DAYS[date] = None
    return _DAYS[date]


def azure_time_ns(text: str) -> int | None:
    """``YYYY-MM-DD HH:MM:SS[.fraction][Z|±HH:MM]`` as integer nanoseconds since the Unix
    epoch (UTC; no offset reads as UTC), or None when ``text`` is not such a time."""
    m = _AZURE_TIME.fullmatch(text.strip())
    if m is None:
        return None
    date, hh, mm, ss, frac, tz = m.groups()
    day, h, mi, s = _days(date), int(hh), int(mm), int(ss)
    if day is None or h > 23 or mi > 59 or s > 59:
        return None
    ns = (((day * 24 + h) * 60 + mi) * 60 + s) * 10**9
    if frac:
        ns += int(frac) * 10 ** (9 - len(frac))
    if tz and tz != "Z":
        sign = -1 if tz[0] == "-" else 1
        ns -= sign * (int(tz[1:3]) * 60 + int(tz[-2:])) * 60 * 10**9
    return ns


def read_azure(path: str | Path, skip_zero: bool = False,
               counts: TraceCounts | None = None) -> Iterator[TraceRow]:
    """Rows of an Azure LLM inference trace CSV (2023 or 2024); ``at`` in nanoseconds."""
    p, counts = Path(path), counts if counts is not None else TraceCounts()
    prev, prev_text = None, ""
    for line, (text, context, generated) in csv_rows(p, AZURE_COLUMNS):
        text = text.strip()
        at = azure_time_ns(text)
        if at is None:
            raise UserError(f"{p}: line {line}: TIMESTAMP: not a time like "
                            f"'2023-11-16 18:15:46.6805900': {text!r}")
        if prev is not None and at < prev:
            raise UserError(f"{p}: line {line}: TIMESTAMP: times must not decrease, got "
                            f"{text} after {prev_text}")
        prev, prev_text = at, text
        counts.rows += 1
        counts.first_at = at if counts.first_at is None else counts.first_at
        prompt = cell_count(p, line, "ContextTokens", context, skip_zero)
        output = cell_count(p, line, "GeneratedTokens", generated, skip_zero)
        if prompt is None or output is None:
            counts.zero_skipped += 1
            continue
        yield TraceRow(line, at, prompt, output)


def read_burstgpt(path: str | Path, skip_zero: bool = False, counts: TraceCounts | None = None,
                  models: Sequence[str] | None = None,
                  log_types: Sequence[str] | None = None) -> Iterator[TraceRow]:
    """Rows of a BurstGPT CSV; ``at`` in seconds. ``models`` / ``log_types``: keep only
    rows whose ``Model`` / ``Log Type`` is one of these (None: all)."""
    p, counts = Path(path), counts if counts is not None else TraceCounts()
    prev = None
    failed = "a failed request; zero_tokens: skip leaves failures out, as the " \
             "BurstGPT_without_fails files do"
    for line, (text, model, request, response, total, log_type) in csv_rows(
            p, BURSTGPT_COLUMNS):
        text = text.strip()
        try:
            at = int(text) if text.lstrip("+-").isdigit() else float(text)
        except ValueError:
            raise UserError(f"{p}: line {line}: Timestamp: not a number: {text!r}") from None
        if not math.isfinite(at):
            raise UserError(f"{p}: line {line}: Timestamp: not finite: {text!r}")
        if at < 0:  # seconds since the trace's start
            raise UserError(f"{p}: line {line}: Timestamp: must be >= 0 (seconds since the "
                            f"trace began), got {text!r}")
        _ordered(p, line, "Timestamp", at, prev)
        prev = at
        counts.rows += 1
        counts.first_at = at if counts.first_at is None else counts.first_at
        prompt = cell_count(p, line, "Request tokens", request, skip_zero)
        output = cell_count(p, line, "Response tokens", response, skip_zero, failed)
        total = cell_count(p, line, "Total tokens", total, True)
        if (total or 0) != (prompt or 0) + (output or 0):
            raise UserError(f"{p}: line {line}: Total tokens: {total or 0} is not Request "
                            f"tokens + Response tokens ({prompt or 0} + {output or 0})")
        if prompt is None or output is None:
            counts.zero_skipped += 1
            continue
        if (models is not None and model.strip() not in models) or (
                log_types is not None and log_type.strip() not in log_types):
            counts.filtered += 1
            continue
        yield TraceRow(line, at, prompt, output)


@dataclass(frozen=True)
class TraceFormat:
    """A timestamped trace format: its reader and the units of its ``TraceRow.at`` per
    second (an integer where the unit allows, so relative times divide exactly). The
    reader takes ``(path, skip_zero, counts)`` and its format's own options as keywords."""

    read: Callable[..., Iterator[TraceRow]]
    units_per_s: int


FORMATS = {
    "mooncake": TraceFormat(read_mooncake, 1000),
    "azure": TraceFormat(read_azure, 10**9),
    "burstgpt": TraceFormat(read_burstgpt, 1),
}
