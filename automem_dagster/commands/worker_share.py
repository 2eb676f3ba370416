"""What a worker on another host must share with the run's host, and the check that it does.

A round's steps pass files, not messages: a shard step writes its episodes under the project home's
``runs/`` and the merge step, maybe on another host, reads them; the scaffolds, the seed sets and the
endpoints file are read there too; Dagster's step outputs (plans, shard results) are pickles in the
instance's storage folder (or ``$AUTOMEM_IO_BASE``). The run config names all of them as paths, so every
worker must see the same two folders at the same paths: the project home (``$AUTOMEM_HOME``) and the step
outputs' folder. Runs, events and concurrency slots are in the instance's database, which the workers reach
over the network (Postgres, ``deploy/dagster-postgres.yaml``).

``automem worker --migrate`` marks both folders with a fresh token and records the token and the paths in the
instance (its key-value table); ``automem worker`` checks before it takes a step that it sees both folders at
the recorded paths with that token, and otherwise names what it lacks. Without the check a worker that lacks
the share starts, takes a shard and fails it (a missing scaffold), and the round fails after its retries.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from pathlib import Path

from automem_dagster.atomic import write_json_atomic

SHARE_KEY = "automem/shared_folders"
"""The instance's key-value entry ``--migrate`` writes: the token and the paths the workers must see."""
MARKER = ".automem-share.json"


class ShareMissing(RuntimeError):
    """A worker does not see a folder the run's host shares with it; the message names it and what to do."""


def shared_folders(instance, project_home: Path) -> dict[str, Path]:
    """The folders a worker must share with the run's host, by what they hold: the project home's ``runs/`` (where
    the marker goes: ``runs/`` is not versioned, and the project home's ``assets/`` sits beside it) and the step
    outputs' folder, unless ``$AUTOMEM_IO_BASE`` puts those in object storage (a URL: not checked here)."""
    from automem_dagster.defs.resources import IO_BASE_ENV  # Dagster's side: imported where a worker runs

    folders = {"project home": Path(project_home) / "runs"}
    io_base = os.environ.get(IO_BASE_ENV)
    if not io_base:
        folders["step outputs"] = Path(instance.storage_directory())
    elif "://" not in io_base:
        folders["step outputs"] = Path(io_base)
    return folders


def mark_shared_folders(instance, project_home: Path) -> dict[str, Path]:
    """Write a fresh token into each shared folder and record it, with the folders' paths, in the instance."""
    token = uuid.uuid4().hex
    folders = shared_folders(instance, project_home)
    for what, folder in folders.items():
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(folder / MARKER, {"token": token, "holds": what})
    record = {"token": token, "host": socket.gethostname(), "project_home": str(project_home),
              "folders": {what: str(folder) for what, folder in folders.items()}}
    instance.run_storage.set_cursor_values({SHARE_KEY: json.dumps(record)})
    return folders


def check_shared_folders(instance, project_home: Path) -> None:
    """Raise ``ShareMissing`` naming every shared folder this host does not see as ``--migrate`` marked it."""
    raw = instance.run_storage.get_cursor_values({SHARE_KEY}).get(SHARE_KEY)
    if raw is None:
        raise ShareMissing("shared folders: the instance records none; run `automem worker --migrate` once on the "
                           "run's host (it marks the project home and the step outputs' folder the workers must see)")
    record = json.loads(raw)
    missing = []
    if str(project_home) != record["project_home"]:
        missing.append(f"project home: this worker's is {project_home}, the run's host's is {record['project_home']}"
                       f" (set AUTOMEM_HOME={record['project_home']})")
    for what, recorded in record["folders"].items():
        here = shared_folders(instance, project_home).get(what)
        marker = Path(recorded) / MARKER
        if here is not None and here != Path(recorded):
            if what != "project home":  # a project home elsewhere is named above
                missing.append(f"{what}: this worker's folder is {here}, the run's host's is {recorded}")
        elif _token(marker) != record["token"]:
            found = "holds another token (a different folder, or an older --migrate)" if marker.exists() else "is missing"
            missing.append(f"{what}: {marker} {found}, so this host does not see the folder {recorded} that "
                           f"`automem worker --migrate` marked on {record['host']}")
    if missing:
        raise ShareMissing("shared folders: " + "; ".join(missing) + ". Mount the share at the same paths as on the "
                           "run's host (docs/scale.md, \"On two machines\")")


def _token(marker: Path) -> str | None:
    try:
        return json.loads(marker.read_text()).get("token")
    except (OSError, ValueError):
        return None
