"""Hardware: GPU, link and model catalogs and the roofline cost model."""

__all__: list[str] = []
