"""A real 1,000-step MiniHack batch (``benchmarks.meta_modes.play``, memory agent against the scripted
server) and the batch tools over it, for the tool-using meta-LLM. ``batch`` is a module-scoped pytest
fixture: a test file takes it as ``batch = played_batch``, and each such file plays its own batch (a
few seconds)."""

import pytest

from automem_dagster.meta.batch_tools import BatchTools
from automem_dagster.meta.evidence import collect_evidence
from automem_dagster.rollout.trajectory import finished_episodes
from automem_dagster.scaffold import load_scaffold
from benchmarks.meta_modes import play


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return play(tmp_path_factory.mktemp("batch1000"), 1000)


def _tools(batch):
    paths = finished_episodes(batch)
    scaffold = load_scaffold("minihack", 0)
    return BatchTools(collect_evidence(paths, [f.name for f in scaffold.files]), scaffold)
