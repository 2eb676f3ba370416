"""Scripted ``tool_calls`` replies (list the episodes, read a step range) and a client of the tool-using
meta-LLM on the scripted stand-in."""

from builders import scripted_client

from benchmarks.meta_modes import EPISODE

LIST = ("list_episodes", {})
READ = ("read_steps", {"episode": EPISODE, "first": 10, "last": 20})


def tools_client(server, **overrides):
    """A meta client of ``server`` (the scripted stand-in) in the tool-using mode."""
    return scripted_client(server, base_url="unused", meta_mode="tools", **overrides)


def _calls(*calls):
    return {"tool_calls": [{"name": name, "arguments": args} for name, args in calls]}
