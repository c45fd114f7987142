"""The exact numpy speculative-decoding core (numpy only: no SimPy, pandas or I/O)."""

from specdec.errors import UserError

__all__ = ["UserError"]
