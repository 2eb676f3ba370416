"""The memory agent: LOG then PLAN every step, in one-model or two-model mode.

LOG lets the memory model record the outcome of the previous step with writes, in one turn
ending with ``<|DONE|>`` (at most the scaffold's cap). PLAN lets it consult memory read-only,
several reads in one turn, then picks the game action (one-model), or hands over to the game
model which only chooses the action (two-model, the proficiency loop's specialist setup).

Calls are the bill (``benchmarks/step_cost.py``), so the harness does not ask the model for
what it already knows (``agent.savings``), by the scaffold's ``routine``: LOG runs after one of its
triggers (shipped: a reward or a change of inventory or level) and at least every ``log_every``
steps; a consultation is shown again without a call while the memory files are unchanged since it
(``reuse_consultation``); none is offered while every file is empty.

Nothing the model says can crash an episode: unparseable output is recorded on the turn, counted,
and the fallback applies.
"""

from __future__ import annotations

import automem_dagster.agent.prompts as prompts
from automem_dagster.agent.sampling import request_seed
from automem_dagster.agent.savings import (
    REUSED_NOTE,
    Consultation,
    last_consultation,
    log_due,
    memory_files,
    result_line,
    show_consulted,
)
from automem_dagster.agent.signals import count_reversals, progress_fingerprint, stuck_for
from automem_dagster.agent.step_records import OpRecord, StepOutcome, TurnRecord, checked_action, resolve_action
from automem_dagster.agent.turn_format import TurnConstraint, TurnFormats, action_turn, ask
from automem_dagster.cpu_ledger import LEDGER
from automem_dagster.games.base import GameState, ParsedAction, state_record
from automem_dagster.llm.client import Completion, ContextOverflow, LLMClient
from automem_dagster.memory import MemoryStore, MemoryStoreError, Op, OpName, format_op, parse_ops
from automem_dagster.scaffold.model import Scaffold


class MemoryAgent:
    """Plays one episode: holds the episode's memory store and recent history.

    ``memory_client`` is None in one-model mode. ``parse_action`` resolves model text to a
    game action (tolerant, with the game's default on failure). ``episode_seed`` seeds every
    request's sampling (``agent.sampling.request_seed``), so a rerun of the episode is identical
    on endpoints that honour seeds. ``lane`` is the episode's place among those played at once;
    on a server whose slots are known it keeps every call of the episode on one slot, whose
    cached prompt is then this episode's (``LLMClient.complete``).
    """

    def __init__(
        self,
        scaffold: Scaffold,
        store: MemoryStore,
        actions: dict[str, str],
        parse_action,
        game_client: LLMClient,
        memory_client: LLMClient | None = None,
        episode_seed: int = 0,
        lane: int | None = None,
    ):
        self.scaffold = scaffold
        self.store = store
        self.actions = actions
        self.parse_action = parse_action
        self.game_client = game_client
        self.memory_client = memory_client
        self.episode_seed = episode_seed
        self.lane = lane
        self.formats = TurnFormats(
            scaffold.operations, scaffold.limits.text_max_chars,
            scaffold.limits.key_max_chars, scaffold.limits.keyword_max_chars,
        )
        self.history: list[tuple[str, float]] = []
        self.fingerprints: list[tuple] = []
        self.last_log_step = 0
        """The step of the latest LOG phase (0 before any): the routine's ``log_every`` counts from it."""
        self.consultation: Consultation | None = None
        self._role: prompts.Role = "memory" if memory_client is not None else "agent"
        self._system = prompts.system_prompt(scaffold, actions, self._role)
        self._game_system = prompts.system_prompt(scaffold, actions, "game")
        for f in scaffold.files:
            store.init_file(f.name, f.initial, f.policy)

    # -- the step ---------------------------------------------------------------------------

    def observe_state(self, state: GameState) -> None:
        """Take the state before a step: rewrite synced files (the harness's job, not the
        model's) and remember what the stuck signal compares."""
        self.fingerprints.append(progress_fingerprint(state_record(state)))
        for f in self.scaffold.files:
            if f.policy.mode == "synced":
                self.store.sync(f.name, state.render(f.policy.sync_source))

    async def step(self, step: int, observation: str) -> StepOutcome:
        """Decide one action; call ``observe_state`` with the current state first."""
        warnings = self.warnings()
        turns: list[TurnRecord] = []
        memory_index, context = {}, {}
        if log_due(step, self.history, self.fingerprints, self.last_log_step, self.scaffold.routine):
            memory_index["log"] = self.store.index()
            turns += await self._log_phase(step, observation, warnings)
        memory_index["plan"] = self.store.index()
        reuse = self.consultation if self.consultation and self.scaffold.routine.reuse_consultation \
            and self.consultation.files == memory_files(self.store) else None
        if reuse is not None:
            context["reused_consultation"] = {"step": reuse.step, "results": reuse.lines}
        plan_turns, parsed = await self._plan_phase(step, observation, warnings, reuse)
        turns += plan_turns
        outcome = StepOutcome(parsed.action, parsed.valid, parsed.note, turns, warnings, memory_index, context)
        self._remember(step, outcome.turn_records, bool(context))
        return outcome

    def _remember(self, step: int, turns: list[dict], reused: bool) -> None:
        """Keep what the next steps decide on: the step of the latest LOG and the latest consultation that
        read something. Played steps and replayed ones (``recall``, from the trajectory's turns) go
        through here alike, so a resumed episode decides the same."""
        if any(t["phase"] == "log" for t in turns):
            self.last_log_step = step
        if not reused and any(t["phase"] == "plan" for t in turns):
            self.consultation = last_consultation(step, turns, self.store)

    def record_outcome(self, action: str, reward: float) -> None:
        self.history.append((action, reward))

    def recall(self, step: int, observation: str, record: dict) -> None:
        """A replayed step: its memory is rebuilt from the journal (``rollout.resume``, before this call);
        the latest LOG and consultation are taken from its turns, as ``step`` takes them."""
        self._remember(step, record["turns"], "reused_consultation" in record.get("memory_context", {}))

    def warnings(self) -> list[str]:
        signals, out = self.scaffold.signals, []
        if signals.stuck.enabled:
            run = stuck_for(self.fingerprints)
            if run >= signals.stuck.repeats:
                out.append(f"stuck: position, inventory and level unchanged for {run} steps; try something different")
        if signals.oscillation.enabled:
            recent = [a for a, _ in self.history[-signals.oscillation.window:]]
            n = count_reversals(recent)
            if n >= signals.oscillation.reversals:
                out.append(f"oscillating: {n} direction reversals in the last {len(recent)} moves; commit to one direction")
        return out

    # -- phases -----------------------------------------------------------------------------

    @LEDGER.charged("request")
    def _messages(self, system: str, step: int, observation: str, warnings: list[str], phase: str) -> list[dict]:
        context = prompts.StepContext(step, observation, self.store.index(), self.history, warnings, phase)
        return prompts.phase_messages(system, self.scaffold, context)

    async def _log_phase(self, step: int, observation: str, warnings: list[str]) -> list[TurnRecord]:
        """One turn: the writes that record the previous step, then DONE."""
        client = self.memory_client or self.game_client
        endpoint = "memory" if self.memory_client else "game"
        messages = self._messages(self._system, step, observation, warnings, prompts.LOG_PHASE)
        budget = self.scaffold.limits.log_max_ops
        if budget == 0:
            return []
        constraint = self.formats.log_turn(self.store.files(), self._writable(), budget,
                                           self.scaffold.limits.log_min_writes)
        comp, dropped = await _complete_within_context(client, messages, constraint,
                                                       request_seed(self.episode_seed, step, "log", 0), self.lane)
        turn = TurnRecord.from_completion("log", endpoint, comp)
        turn.errors += dropped
        parsed = parse_ops(comp.text)
        turn.errors += parsed.errors
        if parsed.action is not None:
            turn.errors.append("an ACTION in the LOG phase is ignored: LOG only records the previous step")
        names = [op.name for op in parsed.ops]
        ops = parsed.ops[:names.index(OpName.DONE)] if OpName.DONE in names else parsed.ops  # DONE ends the turn
        for op in ops[:budget]:
            turn.ops.append(self._execute(op, "log"))
        if len(ops) > budget:
            turn.errors.append(f"operation cap of {budget} reached; the rest was ignored")
        if not parsed.ops:
            turn.errors.append("no memory operation found in the LOG turn")
        return [turn]

    async def _plan_phase(
        self, step: int, observation: str, warnings: list[str], reuse: Consultation | None = None
    ) -> tuple[list[TurnRecord], ParsedAction]:
        if reuse is not None:
            return await self._reused_plan(step, observation, warnings, reuse)
        two_model = self.memory_client is not None
        client = self.memory_client or self.game_client
        endpoint = "memory" if two_model else "game"
        messages = self._messages(self._system, step, observation, warnings, prompts.plan_phase(self._role))
        budget, turns, consulted = self.scaffold.limits.plan_max_ops, [], []
        actions, readable = list(self.actions), self._readable()
        consult = budget > 0 and bool(readable)
        while True:
            constraint = self.formats.plan_turn(readable, actions, consult, end_with_done=two_model, reads=budget,
                                                least=self.scaffold.limits.plan_min_reads)
            seed = request_seed(self.episode_seed, step, "plan", len(turns))
            comp, dropped = await _complete_within_context(client, messages, constraint, seed, self.lane)
            turn = TurnRecord.from_completion("plan", endpoint, comp)
            turn.errors += dropped
            turns.append(turn)
            parsed = parse_ops(comp.text)
            turn.errors += parsed.errors
            if parsed.action is not None and not two_model:
                return turns, checked_action(turn, parsed.action, self.parse_action)
            # The same read twice in a turn shows the same lines twice: it is run once.
            reads = list(dict.fromkeys(op for op in parsed.ops if op.name is not OpName.DONE))[:budget] if consult else []
            for op in reads:
                turn.ops.append(self._execute(op, "plan"))
            consulted += _result_lines(turn)
            if two_model or not reads:  # two-model: one consultation, then the game model acts
                break
            consult = False  # one consultation per phase: the next turn acts
            messages += [{"role": "assistant", "content": comp.text},
                         {"role": "user", "content": prompts.results_message(_result_lines(turn))}]
        if two_model:
            action_turn = await self._game_action(step, observation, warnings, consulted)
            return [*turns, action_turn], resolve_action(action_turn, self.parse_action)
        turn.errors.append("the PLAN phase ended without an ACTION; the action is read from the text or defaulted")
        return turns, self.parse_action(comp.text)

    async def _reused_plan(
        self, step: int, observation: str, warnings: list[str], reuse: Consultation
    ) -> tuple[list[TurnRecord], ParsedAction]:
        """PLAN with the memory unchanged since the consultation of ``reuse.step``: its lines are shown
        again (``Memory consulted:``, then a note of the step) and one call picks the action (the
        game model's in two-model mode, as after a consultation): a turn of phase ``action``, seeded
        as one, since no memory decision was asked for."""
        note = REUSED_NOTE.format(step=reuse.step)
        if self.memory_client is not None:
            turn = await self._game_action(step, observation, warnings, reuse.lines, note)
            return [turn], resolve_action(turn, self.parse_action)
        messages = self._messages(self._system, step, observation, warnings, prompts.plan_phase(self._role))
        show_consulted(messages, reuse.lines, note)
        return await self._act_only(step, messages, "action", "an action-only turn")

    async def _act_only(self, step: int, messages: list[dict], phase: str, what: str):
        """The game model's turn of ``phase`` that may only act (no memory operation is carried out, ``what``
        names the turn in the error that says so), seeded as its phase; an answer without an ACTION is read
        from its text or defaulted, as in every turn."""
        constraint = self.formats.plan_turn([], list(self.actions), False)
        comp, dropped = await _complete_within_context(self.game_client, messages, constraint,
                                                       request_seed(self.episode_seed, step, phase, 0), self.lane)
        turn = TurnRecord.from_completion(phase, "game", comp)
        turn.errors += dropped
        parsed = parse_ops(comp.text)
        turn.errors += parsed.errors
        if parsed.ops:
            turn.errors.append(f"memory operations in {what} are ignored")
        if parsed.action is not None:
            return [turn], checked_action(turn, parsed.action, self.parse_action)
        turn.errors.append("the turn ended without an ACTION; the action is read from the text or defaulted")
        return [turn], self.parse_action(comp.text)

    async def _game_action(self, step: int, observation: str, warnings: list[str], consulted: list[str],
                           note: str = "") -> TurnRecord:
        messages = self._messages(self._game_system, step, observation, warnings, prompts.plan_phase("game"))
        show_consulted(messages, consulted, note)
        comp = await ask(self.game_client, messages, action_turn(list(self.actions)),
                         seed=request_seed(self.episode_seed, step, "action", 0), lane=self.lane)
        turn = TurnRecord.from_completion("action", "game", comp)
        turn.errors += parse_ops(comp.text).errors
        return turn

    # -- memory -----------------------------------------------------------------------------

    def _readable(self) -> list[str]:
        """Files with content: reading an empty file tells nothing, so with none the consultation is skipped."""
        out = []
        for name in self.store.files():
            try:
                if self.store.read_text(name).strip():
                    out.append(name)
            except MemoryStoreError:
                continue
        return out

    def _writable(self) -> list[str]:
        fixed = {f.name for f in self.scaffold.files if f.policy.mode in ("reference", "synced")}
        return [name for name in self.store.files() if name not in fixed]

    def _execute(self, op: Op, phase: str) -> OpRecord:
        if op.name not in self.scaffold.operations:
            return OpRecord(format_op(op), False, f"{op.name.value} is not enabled in this scaffold")
        res = self.store.execute(op, phase=phase)
        return OpRecord(format_op(op), res.ok, res.text, res.redundant, res.empty, res.changed)


def _result_lines(turn: TurnRecord) -> list[str]:
    return [result_line(r.op, r.result) for r in turn.ops]


async def _complete_within_context(client: LLMClient, messages: list[dict], constraint: TurnConstraint,
                                   seed: int | None = None, lane: int | None = None) -> tuple[Completion, list[str]]:
    """A phase's next turn; when the conversation has outgrown the endpoint's context (a scaffold
    allowing many reads per phase), the oldest read results of this phase are dropped until it
    fits, and the turn records that. A first prompt that does not fit alone still fails."""
    notes: list[str] = []
    while True:
        try:
            return await ask(client, messages, constraint, seed=seed, lane=lane), notes
        except ContextOverflow:
            if len(messages) < 4:
                raise
            del messages[2:4]  # the oldest (reply, results) pair after the system and step messages
            notes.append("the oldest read results of this phase were dropped to fit the endpoint's context")

