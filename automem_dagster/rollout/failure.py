"""The message of a batch that could not finish: which server failed, how, what is kept.

After the openai client's bounded retries an episode stops with the last error alone. Someone
facing a stopped batch of long episodes needs more: which endpoint (its role and ``base_url``)
gave up on how many calls after how many failed attempts of which kind, which episodes
finished, where each unfinished one will resume, and that rerunning the same command resumes
it. Errors other than an endpoint's are listed per seed as they were raised.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from automem_dagster.llm.attempts import describe_failures
from automem_dagster.llm.client import EndpointError
from automem_dagster.rollout.trajectory import TrajectoryError, episode_id, partial_path, read_partial, trajectory_path


def failure_message(out: Path, game: str, seeds: list[int], failures: list[tuple[int, BaseException]],
                    finished: int) -> str:
    """What failed how often, what finished, and where the unfinished episodes resume."""
    lines = [f"{len(failures)} of {len(seeds)} episodes failed:"]
    by_server: dict[tuple[str | None, str | None], list[EndpointError]] = {}
    for seed, exc in failures:
        if isinstance(exc, EndpointError) and exc.endpoint is not None:
            by_server.setdefault((exc.endpoint, exc.base_url), []).append(exc)
        else:
            lines.append(f"- seed {seed}: {type(exc).__name__}: {exc}")
    for (role, base_url), errors in by_server.items():
        attempts: Counter[str] = Counter()
        for exc in errors:
            attempts.update(exc.failures)
        failed = f"{_n(sum(attempts.values()), 'failed attempt')} ({describe_failures(attempts) or 'none counted'})"
        lines.append(f"- endpoint {role!r} at {base_url} gave up on {_n(len(errors), 'call')} after bounded retries: "
                     f"{failed}; last error: {errors[-1]}")
    unfinished = [f"seed {seed} at step {_recorded_steps(out, game, seed)}" for seed, _ in failures]
    lines.append(f"Kept: {_n(finished, 'finished episode')} in {out / 'trajectories'}; the unfinished ones resume "
                 f"at their last recorded step ({', '.join(unfinished)}), replayed without model calls.")
    fix = "Fix the endpoint, then rerun" if by_server else "Rerun"
    lines.append(f"{fix} the same command to resume.")
    return "\n".join(lines)


def _n(count: int, thing: str) -> str:
    return f"{count} {thing}{'' if count == 1 else 's'}"


def _recorded_steps(out: Path, game: str, seed: int) -> int:
    """How many steps the unfinished episode of ``seed`` has on record (0 when none survived)."""
    try:
        return len(read_partial(partial_path(trajectory_path(out, episode_id(game, seed))))[1])
    except (OSError, TrajectoryError, UnicodeDecodeError):
        return 0
