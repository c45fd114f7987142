"""Scenario kinds: one registry per family, each kind a typed config that builds its object.

A scenario section whose form is chosen by ``kind:`` (``arrivals:`` for a workload) is a
discriminated union of the config classes listed in its family's registry: lengths and
arrivals (``sim.kinds.workload``), acceptance models (``sim.kinds.acceptance``) and
speculation policies (``sim.kinds.policies``). Each config class validates its own fields
and builds the runtime object (``build``), so the schema, the generated reference and the
builder cannot disagree, and a new kind is its implementation module plus one class here.
"""
