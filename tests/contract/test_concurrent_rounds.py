"""Two processes changing the lineage and the specialist registry at once: no lost update, no damaged file.

Each worker is a fresh interpreter that, many times over, records a candidate of the current
champion, keeps it and promotes it (lineage), and registers and keeps an adapter (registry),
each as one ``updating`` step, the way ``judge_challenger`` (both loops), ``revise_stage`` and
``train_stage`` do. Without the cross-process lock, the later save of an interleaved
pair drops the earlier one's records.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

from automem_dagster.paths import SCAFFOLDS
from automem_dagster.scaffold.lineage import Lineage
from automem_dagster.training.registry import SpecialistRegistry

ROUNDS = 25
WORKER = """
import sys, time
from pathlib import Path
from automem_dagster.metrics.paired import compare_paired
from automem_dagster.metrics.verdict import gate_verdict
from automem_dagster.scaffold.lineage import Lineage
from automem_dagster.training.registry import AdapterRecord, SpecialistRegistry

lineage_root, scaffolds, registry_root, go, name, rounds = sys.argv[1:]
WIN = gate_verdict(compare_paired(dict.fromkeys(range(5), 0.5), dict.fromkeys(range(5), 0.25), n_resamples=10))
while not Path(go).exists():
    time.sleep(0.005)
for k in range(int(rounds)):
    with Lineage.updating("crafter", Path(lineage_root), Path(scaffolds)) as lineage:
        version, parent = lineage.next_version(), lineage.champion().version
        lineage.record_candidate(version, parent, f"{name}-{k}", None)
        lineage.record_verdict(version, WIN)
        lineage.promote(version)
    with SpecialistRegistry.updating("crafter", Path(registry_root)) as reg:
        adapter = reg.next_id()
        reg.add(AdapterRecord(adapter, 0, f"{name}-{k}", "data", "dir", None, "given"))
        reg.record_verdict(adapter, True, f"{name} kept {adapter}", {})
"""


@pytest.mark.contract
def test_two_processes_registering_and_promoting_at_once_lose_nothing(tmp_path):
    scaffolds = tmp_path / "scaffolds"
    (scaffolds / "crafter").mkdir(parents=True)
    shutil.copy(SCAFFOLDS / "crafter" / "v0.yaml", scaffolds / "crafter" / "v0.yaml")
    lineage_root, registry_root, go = tmp_path / "lineage", tmp_path / "specialists", tmp_path / "go"
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(lineage_root), str(scaffolds), str(registry_root),
                                 str(go), name, str(ROUNDS)], stderr=subprocess.PIPE, text=True)
               for name in ("first", "second")]
    time.sleep(1.0)  # both interpreters are up and waiting
    go.touch()
    errors = [w.communicate(timeout=300)[1] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], errors

    lineage = Lineage.load("crafter", lineage_root, scaffolds)  # parses: no damaged file
    versions = lineage.versions
    assert len(versions) == 1 + 2 * ROUNDS
    assert sorted(r.content_hash for r in versions[1:]) == sorted(f"{n}-{k}" for n in ("first", "second")
                                                                  for k in range(ROUNDS))
    # Every candidate descends from the champion before it: the promotions form one chain.
    assert [r.parent for r in versions[1:]] == [r.version for r in versions[:-1]]
    assert lineage.champion().version == 2 * ROUNDS

    reg = SpecialistRegistry.load("crafter", registry_root)
    assert [a.id for a in reg.adapters] == [f"a{i}" for i in range(1, 2 * ROUNDS + 1)]
    assert reg.champion == f"a{2 * ROUNDS}" and all(a.decision == "kept" for a in reg.adapters)
    assert json.loads((registry_root / "crafter.json").read_text())["champion"] == reg.champion
