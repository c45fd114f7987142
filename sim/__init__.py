"""The SimPy serving engine, scenarios and the ``specsim`` command line."""

__all__: list[str] = []
