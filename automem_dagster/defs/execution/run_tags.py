"""Run tags that deploy/dagster.yaml's run-queue limits key on.

A round job plays episodes and may train, usually against an embedded model server started
inside the run; the instance lets one such run go at a time on a small machine. The tag lives
here, beside no other logic, so the jobs and the queue limits cannot drift apart unnoticed
(tests/unit/defs/test_deploy_config.py reads both).
"""

MODEL_ROUND_TAG = "automem/model_round"
MODEL_ROUND_TAGS = {MODEL_ROUND_TAG: "true"}

DRIVER_TAG = "automem/driver"
CLI_DRIVER = "cli"
"""On the runs of a round the CLI ran (``defs/cli_rounds.py``): the chaining sensors leave those to the CLI."""
