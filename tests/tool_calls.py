"""Scripted ``tool_calls`` replies (list the episodes, read a step range), for the tool-using meta-LLM."""

from benchmarks.meta_modes import EPISODE

LIST = ("list_episodes", {})
READ = ("read_steps", {"episode": EPISODE, "first": 10, "last": 20})


def _calls(*calls):
    return {"tool_calls": [{"name": name, "arguments": args} for name, args in calls]}
