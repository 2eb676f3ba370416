"""The meta-LLM's side of the structure loop: deterministic evidence and a budgeted rendering of a
batch, the two things a diagnosis is built from (the meta-LLM calls themselves come on top).

Its modules are imported by name (``meta.evidence``, ``meta.compress``...); the package re-exports
nothing, so curation, which needs neither, does not load the evidence and rendering code."""
