"""The numeric code ``sim.steady_kernel`` compiles with numba: plain Python that works on
a batch's rows one iteration after another (``base``: what they share; ``drafting``: the
draft's passes and the adaptive policy's choice; ``stretch``: steady decoding; ``walk``:
any iteration vLLM v1's scheduler forms)."""

__all__: list[str] = []
