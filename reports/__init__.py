"""Reports: pandas tables, matplotlib figures and report.md from the engine's records."""

__all__: list[str] = []
