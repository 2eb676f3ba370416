"""The rule actor acts on what memory shows: the way a memory line names at a question, else walking on."""

import asyncio

from automem_dagster.agent.rule_actor import RuleActor, act

SYSTEM = "Answer with:\n<|ACTION|>action<|END|>\nActions:\nforward: walk on\nwest: enter the west wing\neast: go east"
ASK = "Step 4. Now:\n\n[junction] You reach a junction. Which way on for the key? west or east."


def _request(memory: str | None, step: str = ASK) -> list[dict]:
    content = f"Memory consulted:\n{memory}\n\n{step}" if memory is not None else step
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}]


def test_the_way_memory_names_about_the_subject_is_taken():
    assert act(_request("<|READ|>notes.txt -> key: east wing")) == "east"
    # the latest line about the key wins: a decoy noted after the sign misleads it
    assert act(_request("<|READ|>notes.txt -> the key lies in the WEST wing\nan old key was lost in the east wing")) == "east"
    # lines about the subject come first: a draught from the west does not override the key's note
    assert act(_request("<|READ|>notes.txt -> key: east wing\na draught blows from the west")) == "east"


def test_without_a_note_it_takes_the_first_way_and_elsewhere_walks_on():
    assert act(_request(None)) == "west"
    assert act(_request("<|READ|>notes.txt -> the hallway is long")) == "west"
    assert act(_request("key: east wing", "Step 1. Now:\n\n[hall] The hallway goes on.")) == "forward"


def test_it_answers_in_the_token_syntax_and_names_itself():
    reply = asyncio.run(RuleActor().complete(_request("key: east wing")))
    assert reply.text == "<|ACTION|>east<|END|>" and reply.input_tokens == 0
    assert RuleActor.identity() == {"actor": "rules", "rule_version": 1}
