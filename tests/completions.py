"""One completion through an ``LLMClient``, closing the client after, for the stand-in and embedded-server tests."""

import asyncio


def _complete(client, messages=None, grammar=None):
    async def go():
        try:
            return await client.complete(messages or [{"role": "user", "content": "hi"}], grammar)
        finally:
            await client.close()

    return asyncio.run(go())
