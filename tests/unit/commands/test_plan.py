"""``automem plan``: the loops' plans as text and as the data-flow picture docs/design.md shows."""

from automem_dagster import cli
from automem_dagster.loop.round_plan import PROFICIENCY_ROUND, STRUCTURE_ROUND


def test_plan_prints_every_step_and_outcome_and_draws_the_figure(tmp_path, capsys):
    figure = tmp_path / "plan.png"
    assert cli.main(["plan", "--figure", str(figure)]) == 0
    captured = capsys.readouterr()
    said = " ".join((captured.out + captured.err).split())  # the console wraps its lines
    for plan in (STRUCTURE_ROUND, PROFICIENCY_ROUND):
        for step in plan.steps:
            assert f"{step.name} reads {', '.join(step.reads) or '(the champion)'}; runs {step.stage_name}" in said
        assert all(f"outcome {outcome}" in said for outcome in plan.outcomes)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
