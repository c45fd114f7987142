"""Workloads: arrivals, length distributions and acceptance models (incl. trace replay)."""

__all__: list[str] = []
