"""Resources: the LLM endpoints, the MLflow tracking store, where a round keeps its files, and
where Dagster keeps the values passed between steps."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import dagster as dg
from pydantic import PrivateAttr

from automem_dagster.defs.execution.step_values import StepValuesIOManager
from automem_dagster.llm.client import refused_request
from automem_dagster.llm.config import EndpointsConfig, endpoints_with_meta
from automem_dagster.llm.session import Clients, ServerPool, connect
from automem_dagster.loop.storage import Storage
from automem_dagster.paths import DEFAULT_ENDPOINTS, RUNS, SCAFFOLDS
from automem_dagster.rollout.seeds import DEFAULT_SEEDS_FILE
from automem_dagster.scaffold.lineage import DEFAULT_ROOT as LINEAGE_ROOT
from automem_dagster.tracking import Tracker
from automem_dagster.training.registry import DEFAULT_ROOT as SPECIALISTS_ROOT

T = TypeVar("T")

class LLMEndpointsResource(dg.ConfigurableResource):
    """The game, memory and meta endpoints from an endpoints YAML file (default: the embedded model);
    ``meta: rules`` puts the rules meta (no model) in the file's meta role, as the CLI's ``--meta rules``.

    Run-scoped: Dagster sets it up once per run (per process under a multiprocess executor), and the
    embedded servers its steps connect to are kept in one ``ServerPool`` until the run ends, so a
    whole round starts each embedded model once instead of once per step."""

    endpoints_file: str = str(DEFAULT_ENDPOINTS)
    meta: str = "endpoints"
    _servers: ServerPool | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._servers = ServerPool()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._servers is not None:
            self._servers.close()

    @property
    def server_starts(self) -> int:
        """How many embedded servers this run has started (0 outside a run)."""
        return self._servers.starts if self._servers is not None else 0

    def config(self) -> EndpointsConfig:
        return endpoints_with_meta(Path(self.endpoints_file), self.meta)

    @asynccontextmanager
    async def clients(self, log_dir: Path, config: EndpointsConfig | None = None, lora: list[Path] | None = None,
                      two_model: bool = False, roles: tuple[str, ...] | None = None):
        """Live clients; an embedded server comes from the run's pool (started once, stopped when the run
        ends, also on failure; outside a run: started on entry and stopped on exit). ``config`` replaces
        the file's endpoints (the two-model agent) and ``lora`` lists GGUF adapters for the embedded server;
        ``two_model`` gives the memory role a client and ``roles`` limits the clients to those a step uses
        (``llm.session.connect``)."""
        async with connect(config or self.config(), log_dir, lora=lora, two_model=two_model, servers=self._servers,
                           roles=roles) as clients:
            yield clients

    def run(self, stage: Callable[[Clients], Awaitable[T]], log_dir: Path, config: EndpointsConfig | None = None,
            lora: list[Path] | None = None, two_model: bool = False, roles: tuple[str, ...] | None = None) -> T:
        """``stage(clients)`` on a fresh event loop, inside ``clients``: how a sync asset calls an async stage."""

        async def go() -> T:
            async with self.clients(log_dir, config, lora, two_model, roles) as clients:
                return await stage(clients)

        try:
            return asyncio.run(go())
        except Exception as exc:
            refused = refused_request(exc)
            if refused is None:
                raise
            raise dg.Failure(f"{exc}\nNot retried: the endpoint refused the request (HTTP {refused.status}), so the "
                             "same request would fail again; fix the endpoint or the request and rerun (a rerun "
                             "resumes the batch)", allow_retries=False) from exc


class MlflowResource(dg.ConfigurableResource):
    """The MLflow store evaluations are logged to (default: ``$MLFLOW_TRACKING_URI`` or the project's sqlite);
    ``enabled: false`` logs nothing (the CLI's ``--no-tracking``: the round's files and Dagster's record stay)."""

    tracking_uri: str | None = None
    ui_url: str | None = None
    artifact_root: str | None = None
    enabled: bool = True

    def tracker(self) -> Tracker | None:
        if not self.enabled:
            return None
        return Tracker(self.tracking_uri, self.ui_url, Path(self.artifact_root) if self.artifact_root else None)


class StorageResource(dg.ConfigurableResource):
    """Where rounds read and write: generated runs, scaffold versions, lineages, the seed sets."""

    runs: str = str(RUNS)
    scaffolds: str = str(SCAFFOLDS)
    lineage: str = str(LINEAGE_ROOT)
    seeds_file: str = str(DEFAULT_SEEDS_FILE)
    specialists: str = str(SPECIALISTS_ROOT)

    def storage(self) -> Storage:
        return Storage(Path(self.runs), Path(self.scaffolds), Path(self.lineage), Path(self.seeds_file),
                       Path(self.specialists))

    @classmethod
    def of(cls, storage: Storage) -> StorageResource:
        """The resource for ``storage`` (where a CLI round reads and writes)."""
        return cls(runs=str(storage.runs), scaffolds=str(storage.scaffolds), lineage=str(storage.lineage),
                   seeds_file=str(storage.seeds_file), specialists=str(storage.specialists))


IO_BASE_ENV = "AUTOMEM_IO_BASE"
"""Where step outputs go: a folder (a shared mount), or an object-store URL such as
``s3://bucket/automem-io`` (fsspec's protocols, with that protocol's package installed, e.g. s3fs)."""


def io_manager() -> StepValuesIOManager:
    """Dagster's pickling IO manager for the values passed between steps (folders and the typed values of
    ``plans/values.py``; the batches themselves are files under the project home), showing each value's path
    short (``step_values``). Under ``$AUTOMEM_IO_BASE`` when set (Dagster opens it as a ``UPath``, so
    object storage works too); else under the instance's ``local_artifact_storage``
    (deploy/dagster.yaml, deploy/k8s/dagster.yaml), Dagster's default."""
    return StepValuesIOManager(base_dir=os.environ.get(IO_BASE_ENV) or None)


def default_resources() -> dict[str, dg.ConfigurableResource]:
    """The project's own files, endpoints and tracking store, and the IO manager."""
    return {"endpoints": LLMEndpointsResource(), "mlflow": MlflowResource(), "storage": StorageResource(),
            "io_manager": io_manager()}
