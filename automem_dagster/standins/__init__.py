"""Stand-ins for the servers the client talks to: scripted replies, no model, each run as its own process.

``scripted_server`` answers as llama.cpp's server does, ``scripted_vllm`` as vLLM's, and either can be
told to enforce a hosted provider's rules (``scripted_provider``) and tool-calling behaviour
(``scripted_tools``); each module cites the source it follows. Tests and benchmarks use them to
drive the agent and the loops through exact replies, and to time the harness without a model. They are kept apart from
the real client (``automem_dagster.llm``), which never imports them.
"""
