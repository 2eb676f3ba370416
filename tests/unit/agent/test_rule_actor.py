"""The rule actor acts on what memory shows: the way a memory line names at a question, else walking on."""

import asyncio

from automem_dagster.llm.rule_actor import RuleActor, act

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


def test_without_a_note_it_does_not_guess_and_elsewhere_walks_on():
    """Rule 2: at a question with no line naming one way, the first listed action (waiting), not a way."""
    assert act(_request(None)) == "forward"
    assert act(_request("<|READ|>notes.txt -> the hallway is long")) == "forward"
    assert act(_request("<|READ|>notes.txt -> wings open to the west and east")) == "forward"  # names both
    assert act(_request("key: east wing", "Step 1. Now:\n\n[hall] The hallway goes on.")) == "forward"


def test_it_answers_in_the_token_syntax_and_names_itself():
    reply = asyncio.run(RuleActor().complete(_request("key: east wing")))
    assert reply.text == "<|ACTION|>east<|END|>" and reply.input_tokens == 0
    assert RuleActor.identity() == {"actor": "rules", "rule_version": 2}


def test_a_log_turn_can_be_held_to_a_least_number_of_writes():
    """``limits.log_min_writes``: the grammar and the JSON schema of a LOG turn both refuse an early DONE."""
    from automem_dagster.agent.turn_format import TurnFormats
    from automem_dagster.memory.ops import OpName

    formats = TurnFormats([OpName.READ, OpName.APPEND], 64, 24, 24)
    free, held = formats.log_turn(["notes.txt"], ["notes.txt"], 5), formats.log_turn(["notes.txt"], ["notes.txt"], 5, 1)
    assert '(write "\\n"){0,5} "<|DONE|>"' in free.grammar and '(write "\\n"){1,5} "<|DONE|>"' in held.grammar
    assert "minItems" not in str(free.schema) and held.schema["properties"]["writes"]["minItems"] == 1
    nothing = formats.log_turn(["notes.txt"], [], 5, 1)  # nothing writable: DONE alone, whatever the least
    assert nothing.grammar.startswith('root ::= "<|DONE|>"')
