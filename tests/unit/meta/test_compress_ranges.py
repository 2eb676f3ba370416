"""The tool-using meta-LLM (``meta_mode: tools``) over a real 1,000-step batch.

The batch is played once per module: MiniHack Corridor-R3, seed 7, by the memory agent against
the scripted server (``benchmarks.meta_modes.play``: replies cycle, so memory files change and
the agent oscillates). The meta endpoint is the scripted server answering with ``tool_calls`` the way OpenAI's chat-completions
API does (platform.openai.com/docs/guides/function-calling: ``finish_reason: "tool_calls"``,
``message.tool_calls[].function.arguments`` a JSON string).
"""

from automem_dagster.meta.compress import ranges


def test_ranges_are_compact():
    assert ranges({1, 2, 3, 7, 9, 10}) == "1-3, 7, 9-10" and ranges(set()) == ""
