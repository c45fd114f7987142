"""What every trace reader shares: the row and count records, line-by-line decoding, CSV
rows under an exact header, and the token-count check with its one-line errors."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from specdec.errors import UserError


@dataclass(frozen=True)
class TraceRow:
    """One request as a trace file gives it. ``at`` is in the format's own time unit
    (``FORMATS``); None for a format without timestamps (ShareGPT)."""

    line: int
    at: int | float | None
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None = None
    hash_block_tokens: int | None = None  # the prompt tokens each hash id covers


@dataclass
class TraceCounts:
    """What reading and selecting a trace did with its rows (for messages and reports)."""

    rows: int = 0  # data rows read and checked
    first_at: int | float | None = None  # the first row's time, in the format's unit
    zero_skipped: int = 0  # rows with 0 prompt or output tokens left out (skip_zero)
    filtered: int = 0  # rows left out by a format filter (BurstGPT models / log types, vLLM's)
    before_window: int = 0  # rows before start_s
    sampled_out: int = 0  # rows the sample did not draw
    kept: int = 0
    stopped: str | None = None  # why reading stopped before the end of the file

    def describe(self) -> str:
        """``'40 rows read: 3 with 0 tokens skipped, ...; stopped at ...'``."""
        parts = [f"{n} {what}" for n, what in (
            (self.zero_skipped, "with 0 tokens skipped"), (self.filtered, "filtered out"),
            (self.before_window, "before start_s"), (self.sampled_out, "not sampled"))
            if n]
        text = f"{self.rows} rows read" + (": " + ", ".join(parts) if parts else "")
        return text + (f"; stopped at {self.stopped}" if self.stopped else "")


def lines(path: Path) -> Iterator[str]:
    """The text lines of ``path`` (a leading UTF-8 byte-order mark dropped), decoded one at
    a time so that a byte that is not UTF-8 is reported at its own line."""
    try:
        f = path.open("rb")
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    with f:
        for n, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(f"{path}: line {n}: cannot read: not UTF-8 text (byte "
                                f"{e.start + 1} of the line)") from None
            yield text.removeprefix("\ufeff") if n == 1 else text


def token_count(path: Path, line: int, field: str, value, skip_zero: bool, hint: str = ""):
    """A token count (a JSON integer) as an int >= 1, None for 0 when ``skip_zero``;
    anything else is a UserError naming ``path``, ``line`` and ``field``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{path}: line {line}: {field}: not an integer: {value!r}")
    if value < 0:
        raise UserError(f"{path}: line {line}: {field}: must be >= 0, got {value}")
    if value == 0 and not skip_zero:
        hint = hint or "a request with no tokens; zero_tokens: skip leaves such rows out"
        raise UserError(f"{path}: line {line}: {field}: must be >= 1, got 0 ({hint})")
    return value or None


def cell_count(path: Path, line: int, field: str, text: str, skip_zero: bool, hint: str = ""):
    """:func:`token_count` of the text of a CSV cell."""
    text = text.strip()
    if not text:
        raise UserError(f"{path}: line {line}: {field}: missing value")
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):  # int() would take '1_000' and '+5'
        raise UserError(f"{path}: line {line}: {field}: not an integer: {text!r}")
    return token_count(path, line, field, int(text), skip_zero, hint)


def check_header(p: Path, header: list[str], allowed: tuple[str, ...],
                 required: tuple[str, ...]) -> None:
    """Refuse a CSV header (line 1) with a column not in ``allowed`` or without one of
    ``required``, naming the file and the column."""
    for h in header:
        if h not in allowed:
            raise UserError(f"{p}: line 1: unknown column '{h}' (expected "
                            f"{', '.join(allowed)})")
        if header.count(h) > 1:  # one of the two would be read, the other dropped
            raise UserError(f"{p}: line 1: column '{h}' given twice")
    for c in required:
        if c not in header:
            raise UserError(f"{p}: line 1: missing column '{c}'")


def csv_rows(p: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, list[str]]]:
    """(line, cells in the order of ``columns``) of a CSV whose header holds exactly
    ``columns`` (in any order)."""
    reader = csv.reader(lines(p), strict=True)
    try:
        header = [h.strip() for h in next(reader, [])]
        if not header:
            raise UserError(f"{p}: empty file (expected a header {','.join(columns)})")
        check_header(p, header, columns, columns)
        order = [header.index(c) for c in columns]
        any_row = False
        for cells in reader:
            if len(cells) != len(header):
                raise UserError(f"{p}: line {reader.line_num}: {len(cells)} cells for "
                                f"{len(header)} columns")
            any_row = True
            yield reader.line_num, [cells[i] for i in order]
    except csv.Error as e:
        raise UserError(f"{p}: line {reader.line_num}: not valid CSV: {e}") from None
    if not any_row:
        raise UserError(f"{p}: no requests after the header")
