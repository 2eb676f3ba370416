"""The training examples: a curated ``dataset.parquet`` loaded and checked row by row against the
row curation writes (``training/sft_row.SFTRow``), then split into training and validation (by
episode whenever there are two or more)."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from automem_dagster.training.sft_result import DATASET_FILE, TrainingError
from automem_dagster.training.sft_row import REQUIRED_COLUMNS, SFTRow, row_problem


def load_examples(dataset_dir: Path) -> list[dict[str, Any]]:
    """The rows of ``dataset_dir/dataset.parquet``, checked; ``TrainingError`` names the file and the problem."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(dataset_dir) / DATASET_FILE
    redo = "rebuild it with the curation step (one row per memory decision)"
    if not path.is_file():
        raise TrainingError(f"{path} does not exist: give the directory the curation step wrote its dataset to")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise TrainingError(f"{path} is not a readable parquet file ({exc}); {redo}") from exc
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise TrainingError(f"{path} lacks the columns {missing} (it has {table.column_names}); {redo}")
    rows = table.select([c for c in SFTRow.model_fields if c in table.column_names]).to_pylist()
    if len(rows) < 2:
        raise TrainingError(f"{path} holds {len(rows)} example(s): training needs at least 2 (one to train on, "
                            f"one to validate on), and a useful run hundreds; collect more episodes and {redo}")
    problems = []
    for i, row in enumerate(rows):
        problem = row_problem(row)
        if problem:
            problems.append(f"row {i} (episode {row.get('episode')!r}, step {row.get('step')}): {problem}")
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise TrainingError(f"{path} has {len(problems)} malformed row(s): {shown}. Each row needs `prompt`: chat "
                            "messages (system/user/assistant, ending with a user message) and `completion`: exactly "
                            f"one assistant message; {redo}")
    return [{c: row[c] for c in REQUIRED_COLUMNS} for row in rows]


@dataclass(frozen=True)
class Split:
    train: list[int]
    validation: list[int]
    by: str  # "episode" or "example"
    episodes_train: int
    episodes_validation: int


def split_examples(episodes: list[str], validation_fraction: float, seed: int = 0) -> Split:
    """Row indices for training and validation, the same for the same episodes, fraction and seed.

    With two or more episodes whole episodes are held out, in an order fixed by a hash of the seed
    and the episode name (so the row order of the file does not matter), until the held-out rows
    reach ``validation_fraction`` of the dataset; at least one episode stays on each side. With a
    single episode, single rows are held out the same way. Either side has at least one row.
    """
    n = len(episodes)
    if not 0 < validation_fraction < 1:
        raise TrainingError(f"validation_fraction={validation_fraction}: give a fraction between 0 and 1 (e.g. 0.1)")
    if n < 2:
        raise TrainingError(f"{n} example(s) cannot be split into training and validation: give at least 2")
    target = max(1, math.ceil(validation_fraction * n))
    names = sorted(set(episodes))
    if len(names) >= 2:
        rows: dict[str, list[int]] = {}
        for i, ep in enumerate(episodes):
            rows.setdefault(ep, []).append(i)
        held: list[str] = []
        count = 0
        for ep in sorted(names, key=lambda e: _hash(seed, e)):
            if count >= target or len(held) == len(names) - 1:
                break
            held.append(ep)
            count += len(rows[ep])
        held_set = set(held)
        validation = sorted(i for ep in held for i in rows[ep])
        train = [i for i in range(n) if episodes[i] not in held_set]
        return Split(train, validation, "episode", len(names) - len(held), len(held))
    order = sorted(range(n), key=lambda i: _hash(seed, str(i)))
    validation = sorted(order[:min(target, n - 1)])
    held_rows = set(validation)
    return Split([i for i in range(n) if i not in held_rows], validation, "example", 1, 1)


def _hash(seed: int, name: str) -> str:
    return hashlib.sha256(f"{seed}\0{name}".encode()).hexdigest()
