"""Builders the test modules share: trajectory records as the runner writes them, a shipped scaffold
under another memory routine, and the Dagster resources and materialization metadata of an
in-process round. One definition each, so a field the
runner adds (``finish_reason``) or a resource the assets need reaches every test at once."""

from __future__ import annotations

import shutil

import dagster as dg
import yaml

from automem_dagster.commands import shared
from automem_dagster.defs.cli_rounds import run_structure_round
from automem_dagster.defs.resources import LLMEndpointsResource, MlflowResource
from automem_dagster.llm import EndpointConfig, LLMClient
from automem_dagster.llm.config import EndpointsConfig, load_endpoints
from automem_dagster.loop.report import RoundReport
from automem_dagster.loop.settings import StructureConfig
from automem_dagster.loop.storage import Storage
from automem_dagster.loop.structure import RoundResult
from automem_dagster.paths import DEFAULT_ENDPOINTS, SCAFFOLDS
from automem_dagster.scaffold import Scaffold, load_scaffold, parse_scaffold
from automem_dagster.tracking import Tracker


def turn(phase: str, text: str = "", ops=(), errors=(), *, input_tokens: int = 100, output_tokens: int = 5,
         endpoint: str = "game", **extra) -> dict:
    """One model turn of a step record (``rollout/trajectory.py``: ``turns[]``)."""
    return {"phase": phase, "endpoint": endpoint, "text": text, "ops": list(ops), "errors": list(errors),
            "input_tokens": input_tokens, "output_tokens": output_tokens, "latency_s": 0.1, "attempts": 1,
            "finish_reason": "stop", **extra}


def step(action: str = "noop", turns=(), *, reward: float = 0.0, progression: float = 0.0, valid: bool = True,
         observation: str | None = None, warnings=(), state: dict | None = None, wall_s: float = 0.1, **extra) -> dict:
    """One step record as the runner writes it (without the ``type``/``step`` keys the writer adds)."""
    return {"observation": f"obs before {action}" if observation is None else observation, "action": action,
            "action_valid": valid, "action_note": "", "reward": reward, "progression": progression, "done": False,
            "warnings": list(warnings), "turns": list(turns), "state": state or {}, "info": {}, "game_s": 0.0,
            "wall_s": wall_s, **extra}


def with_routine(game: str, **routine) -> Scaffold:
    """``game``'s shipped v0 with its ``routine`` settings changed (``log_every=1``: a LOG every step),
    validated as a scaffold file would be."""
    data = load_scaffold(game, 0).model_dump(mode="json")
    return parse_scaffold({**data, "routine": {**data["routine"], **routine}}, f"{game} v0 with routine {routine}")


def mlflow_resource(root) -> MlflowResource:
    """A tracking store in ``root`` (an sqlite file and an artifact folder)."""
    return MlflowResource(tracking_uri=f"sqlite:///{root}/mlflow.db", artifact_root=str(root / "artifacts"))


def cli_storage(tmp_path, monkeypatch) -> Storage:
    """A storage under ``tmp_path`` with copies of the shipped scaffolds, which the ``automem`` commands run
    in-process (``cli.main``) use instead of the project's own."""
    scaffolds = tmp_path / "assets" / "scaffolds"
    shutil.copytree(SCAFFOLDS, scaffolds)
    store = Storage(runs=tmp_path / "runs", scaffolds=scaffolds, lineage=tmp_path / "assets" / "lineage")
    monkeypatch.setattr(shared, "STORAGE", store)
    return store


def endpoints_file(path, server, roles=("game", "meta"), memory=None, **settings):
    """An endpoints file at ``path`` whose every role in ``roles`` is the scripted ``server`` (unconstrained,
    with ``settings`` such as ``max_retries``), and whose ``memory`` role, where ``memory`` (a scripted
    vLLM, conftest ``specialist_vllm``) is given, is served by vLLM, which loads the round's specialist
    at runtime."""
    endpoint = {"base_url": server.base_url, "model": "scripted", "constrained": "none", **settings}
    config = {role: {"name": role, **endpoint} for role in roles}
    if memory is not None:
        config["memory"] = {"name": "memory", "server": "vllm", "base_url": memory.base_url, "model": "scripted",
                            "constrained": "none"}
    path.write_text(yaml.safe_dump(config))
    return path


def on_embedded(config: EndpointsConfig, server) -> EndpointsConfig:
    """``config`` with every role it gives the embedded model served by ``server`` instead, the session's
    running llama.cpp of the same model (conftest ``embedded``): the same settings, no server of its own."""
    return config.model_copy(update={role: c.model_copy(update={"base_url": server.base_url, "server": "llama.cpp"})
                                     for role, c in config.roles().items() if c.embedded})


def shipped_on_embedded(path, server):
    """The shipped embedded endpoints file (``assets/endpoints/embedded.yaml``) written at ``path`` with its
    roles served by the session's embedded ``server`` (``on_embedded``)."""
    config = on_embedded(load_endpoints(DEFAULT_ENDPOINTS), server)
    path.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_none=True)))
    return path


def scripted_client(server, name: str = "meta", **settings) -> LLMClient:
    """A client of the scripted ``server`` for the role ``name``, unconstrained unless ``settings`` say otherwise."""
    return LLMClient(EndpointConfig(name=name, **{"constrained": "none", **settings}), server.base_url)


def round_resources(tmp_path, storage, server, mlflow: MlflowResource, roles=("game", "meta"), memory=None) -> dict:
    """The resources of a round whose every endpoint in ``roles`` is the scripted ``server`` (and the
    memory role the scripted vLLM ``memory``, where given)."""
    path = endpoints_file(tmp_path / f"endpoints-{server.port}.yaml", server, roles, memory)
    return {"endpoints": LLMEndpointsResource(endpoints_file=str(path)), "storage": storage, "mlflow": mlflow}


def whole(shown: dict, key: str) -> str:
    """A metadata text as a whole: ``<key>_full`` where the page sums a long one up (``defs/metadata/long_values``)."""
    return shown.get(f"{key}_full", shown[key])


def run_id_of(link: str) -> str:
    """The MLflow run id a metadata link (``[label](<ui>/#/experiments/<e>/runs/<id>)``) points at."""
    url = link.rsplit("](", 1)[1].removesuffix(")")
    assert url.startswith("http") and "/runs/" in url, link
    return url.rsplit("/", 1)[1]


def metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    """The metadata values of ``asset``'s one materialization in ``result``."""
    [event] = result.asset_materializations_for_node(asset)
    return {k: v.value for k, v in event.metadata.items()}


def structure_round(storage: Storage, config: EndpointsConfig, settings: StructureConfig,
                    tracker: Tracker | None = None) -> tuple[RoundResult, RoundReport]:
    """One whole structure round as the CLI runs it (a Dagster run, ``defs/cli_rounds.py``) on the endpoints
    ``config`` (written beside the round's runs folder), in ``storage``; its result and report."""
    path = storage.runs.parent / f"endpoints-{settings.game.replace(':', '-')}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_none=True)))
    result, report, _ = run_structure_round(settings, path, storage, tracker)
    return result, report
