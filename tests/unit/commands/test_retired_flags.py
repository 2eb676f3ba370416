"""One flag per budget: ``--max-steps`` once meant four budgets (rollout's 50 steps, a round's training-seed
steps, ``evaluate``'s evaluation steps, the demo's), so an old command line is refused (exit 2) naming the
flags of that command that replace it, instead of running with a budget it did not mean."""

import pytest

from automem_dagster.cli import build_parser
from automem_dagster.cli import main as cli_main
from automem_dagster.commands.budget_flags import RETIRED_FLAGS, RetiredFlag

REFUSALS = [
    (["rollout", "--game", "crafter", "--max-steps", "5"], "--max-steps is retired", "use --rollout-max-steps"),
    (["rollout", "--game", "crafter", "--episodes", "5"], "--episodes is retired", "use --rollout-episodes"),
    (["revise", "--game", "crafter", "--max-steps", "5"], "--max-steps is retired",
     "use --rollout-max-steps (steps per training-seed episode) or --eval-max-steps (steps per evaluation episode)"),
    (["train", "--game", "crafter", "--episodes", "5"], "--episodes is retired",
     "use --rollout-episodes (training-seed episodes) or --eval-episodes (evaluation seeds)"),
    (["evaluate", "--game", "crafter", "--max-steps", "5"], "--max-steps is retired", "use --eval-max-steps"),
    (["noise", "--game", "crafter", "--max-steps", "5"], "--max-steps is retired", "use --eval-max-steps"),
    (["headroom", "--game", "keydoor", "--episodes", "5"], "--episodes is retired", "use --eval-episodes"),
    (["facts", "--game", "keydoor", "--episodes", "5"], "--episodes is retired", "use --eval-episodes"),
]


@pytest.mark.parametrize(("argv", "refused", "replacement"), REFUSALS, ids=[" ".join(argv) for argv, _, _ in REFUSALS])
def test_a_retired_flag_is_refused_naming_the_flag_that_replaces_it(argv, refused, replacement, capsys):
    with pytest.raises(SystemExit) as stopped:
        cli_main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert refused in err and replacement in err


def test_a_retired_flag_alone_is_refused_too(capsys):
    """Without a value (``nargs="?"``) it is still the retired flag, not a parse error about its value."""
    with pytest.raises(SystemExit):
        cli_main(["compare", "--game", "crafter", "--max-steps"])
    assert "use --eval-max-steps" in capsys.readouterr().err


def test_no_command_takes_a_retired_flag_as_a_budget():
    """Every command that has a budget flag refuses the retired ones; none gives them a meaning of its own."""
    commands = build_parser()._subparsers._group_actions[0].choices
    for name, command in commands.items():
        for old, new in RETIRED_FLAGS.items():
            action = command._option_string_actions.get(old)
            has_budget = any(flag in command._option_string_actions for flag in new)
            assert action is None or isinstance(action, RetiredFlag), f"automem {name} {old} has a meaning"
            assert (action is not None) == has_budget, f"automem {name} {old}"
            assert old not in command.format_usage()  # refused, never offered
