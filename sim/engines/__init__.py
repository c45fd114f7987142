"""Real deployments' command lines as scenarios: ``vllm serve`` (``sim.engines.vllm``),
SGLang's ``launch_server`` (``sim.engines.sglang``) and ``vllm bench serve``
(``sim.engines.bench``); and back, the ``vllm serve`` line that realises a scenario.

Model ids (Hugging Face ids or paths) are resolved to catalog ids by the caller's
``resolve_model`` (``hardware.Catalog.model`` knows the aliases).
"""
