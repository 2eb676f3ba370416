"""A revision whose candidate is a version a round already judged is rejected before it is played: the
rules meta proposed the same notes cap twice on key and door, and the second was played on 30 seeds
only to be rolled back again (docs/results.md, 2026-12-07)."""

import shutil

from automem_dagster.loop.structure import refuse_judged_again
from automem_dagster.meta.revise import Revision
from automem_dagster.metrics.paired import compare_paired
from automem_dagster.metrics.verdict import gate_verdict
from automem_dagster.paths import SCAFFOLDS
from automem_dagster.scaffold import content_hash, load_scaffold
from automem_dagster.scaffold.io import scaffold_yaml
from automem_dagster.scaffold.lineage import Lineage

SEEDS = range(42, 47)
TIE = gate_verdict(compare_paired(dict.fromkeys(SEEDS, 0.5), dict.fromkeys(SEEDS, 0.5), n_resamples=100))


def capped(v0, version, max_lines):
    notes = v0.files[0].model_copy(update={"policy": v0.files[0].policy.model_copy(
        update={"max_lines": max_lines, "prune_to": max_lines // 2})})
    return v0.model_copy(update={"version": version, "parent": 0, "files": [notes]})


def revision_of(candidate):
    return Revision("keydoor", 0, candidate.version, "runs/diagnoses/d", scaffold_yaml(candidate), {"files": []},
                    ["cap"], "diff", None)


def test_a_candidate_with_the_content_of_a_judged_version_is_rejected(tmp_path):
    scaffolds = tmp_path / "scaffolds"
    (scaffolds / "keydoor").mkdir(parents=True)
    shutil.copy(SCAFFOLDS / "keydoor" / "v0.yaml", scaffolds / "keydoor" / "v0.yaml")
    lineage = Lineage.load("keydoor", root=tmp_path / "lineage", scaffolds=scaffolds)
    v0 = load_scaffold("keydoor", 0, scaffolds)
    v1 = capped(v0, 1, 20)
    lineage.record_candidate(1, 0, content_hash(v1), None)
    pending_twin = refuse_judged_again(revision_of(capped(v0, 2, 20)), lineage)
    assert pending_twin.accepted            # v1 is not judged yet: a round finishes it, no verdict to repeat
    lineage.record_verdict(1, TIE)
    again = refuse_judged_again(revision_of(capped(v0, 2, 20)), lineage)
    assert not again.accepted and again.candidate_yaml is None
    assert again.rejected_reason.startswith("the candidate is v1 again") and "nothing new to evaluate" in again.rejected_reason
    fresh = refuse_judged_again(revision_of(capped(v0, 2, 40)), lineage)
    assert fresh.accepted and fresh.rejected_reason is None
