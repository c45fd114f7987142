"""Comma-separated number lists given on the command line (``--tree 3,1,1``, ``--widths``)."""

from __future__ import annotations

from specdec.errors import UserError


def int_list(text: str, flag: str, minimum: int | None = None, what: str = "values") -> list[int]:
    """``"3,1,1"`` -> ``[3, 1, 1]``; a one-line UserError naming ``flag`` otherwise.

    With ``minimum``, every value must be >= it (``what`` names the values in the message).
    """
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise UserError(f"{flag}: must be comma-separated integers, got {text!r}") from None
    if minimum is not None and any(v < minimum for v in values):
        raise UserError(f"{flag}: {what} must be >= {minimum}, got {text!r}")
    return values


def float_list(text: str, flag: str) -> list[float]:
    """``"1.63,2.34"`` -> ``[1.63, 2.34]``; a one-line UserError naming ``flag`` otherwise."""
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise UserError(f"{flag}: must be comma-separated numbers, got {text!r}") from None
