"""The embedded server's turns: one request at a time, a slot's cache reused only within its episode."""

import asyncio

from automem_dagster.llm.slot_turns import SlotTurns, episode, lanes_for


def test_a_slot_reuses_its_cache_only_for_the_episode_it_served_last():
    turns = SlotTurns(2)

    async def ask(name: str | None, slot: int) -> bool:
        token = episode.set(name)
        try:
            async with turns.turn(slot) as reuse:
                return reuse
        finally:
            episode.reset(token)

    async def go():
        return [await ask("a", 0), await ask("a", 0), await ask("b", 0), await ask("a", 0), await ask("b", 1),
                await ask(None, 1), await ask(None, 1)]

    assert asyncio.run(go()) == [False, True, False, False, False, False, False]


def test_requests_take_turns_one_at_a_time():
    turns, inside, most = SlotTurns(2), [0], [0]

    async def one(slot: int):
        async with turns.turn(slot):
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            await asyncio.sleep(0.01)
            inside[0] -= 1

    async def go():
        await asyncio.gather(*(one(i % 2) for i in range(6)))

    asyncio.run(go())
    assert most[0] == 1


class _Client:
    def __init__(self, slots):
        self.turns = SlotTurns(slots)


class _Clients:
    def __init__(self, game, memory=None):
        self.game, self.memory = game, memory


def test_an_embedded_server_plays_at_most_its_slots_at_once():
    count, why = lanes_for(4, _Clients(_Client(2)))
    assert count == 2 and "2 slots" in why and "not 4" in why
    assert lanes_for(2, _Clients(_Client(2))) == (2, None)
    assert lanes_for(4, _Clients(object())) == (4, None)      # a server that does not take turns
