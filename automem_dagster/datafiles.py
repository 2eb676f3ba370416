"""Reading the project's YAML data files into pydantic models, with errors a person can act on.

Scaffolds, endpoint configs and seed sets are all hand-edited YAML; every one of them must
fail the same way on bad input: name the file, name the offending field, say what to do.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)


def read_text_file(path: Path, label: str, error: type[Exception], advice: str, missing_hint: str | None = None) -> str:
    """The UTF-8 text of ``path``; ``error`` names the file, what is wrong with it and ``advice``.

    Every project file a person might damage (lineage, registry, trajectories, batch manifests)
    is read through here, so a stray byte or a directory in the file's place gets the same kind
    of answer: which file, where (line and byte), and what to do. Nothing is changed on disk.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise error(f"{label} {path} does not exist: {missing_hint or advice}") from exc
    except IsADirectoryError as exc:
        raise error(f"{label} {path} is a directory, not a file: move the directory aside, then {advice}") from exc
    except OSError as exc:
        raise error(f"cannot read {label} {path} ({exc.strerror}): {advice}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(f"{label} {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}, "
                    f"line {line}): {advice}") from exc


def read_json_file(path: Path, label: str, error: type[Exception], advice: str, missing_hint: str | None = None) -> object:
    """The parsed JSON of ``path``, with ``read_text_file``'s errors and the line and column of bad JSON."""
    text = read_text_file(path, label, error, advice, missing_hint)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{label} {path} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): "
                    f"{advice}") from exc


def appended_records(path: Path, label: str, error: type[Exception]) -> Iterator[tuple[int, object]]:
    """``(line number, record)`` of a JSONL file written line by line as things happen (a journal, a
    partial trajectory). A last line cut short by a killed process ends the reading: it was never a
    whole record. Any other line that is not JSON raises ``error`` naming the file and the line."""
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                return
            raise error(f"{label} {path} line {number} is not JSON ({exc.msg})") from exc
        yield number, record


def validation_problems(exc: ValidationError) -> str:
    """``field.path: message; ...`` for every error pydantic found."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg']}" for e in exc.errors())


def read_yaml(path: Path, label: str, error: type[Exception], missing_hint: str) -> object:
    """The parsed YAML of ``path``; ``error`` names the file when it is missing or not YAML."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except FileNotFoundError as exc:
        raise error(f"{label} {path} does not exist: {missing_hint}") from exc
    except yaml.YAMLError as exc:
        raise error(f"{label} {path} is not valid YAML: {exc}") from exc


def validate(model: type[M], data: object, label: str, source: object, error: type[Exception]) -> M:
    """``model`` validated from ``data``; ``error`` lists every invalid field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(f"{label} {source} is invalid: {validation_problems(exc)}") from exc


def load_yaml_model(path: Path, model: type[M], label: str, error: type[Exception], missing_hint: str) -> M:
    return validate(model, read_yaml(path, label, error, missing_hint), label, path, error)


def drop_nulls(data: object) -> object:
    """``data`` without the object keys whose value is null, at every depth. A strict JSON
    schema makes every optional field required and nullable, so in a reply null means "not
    given" and the model's default applies (``llm.strict_schema``)."""
    if isinstance(data, dict):
        return {k: drop_nulls(v) for k, v in data.items() if v is not None}
    if isinstance(data, list):
        return [drop_nulls(v) for v in data]
    return data


def parse_json_reply(text: str, model: type[M]) -> tuple[M | None, str | None]:
    """``(value, None)`` for a model reply holding a valid ``model`` object (bare or in a ```json
    fence), else ``(None, error)`` saying what is wrong. Replies are untrusted text that may be
    cut off or off-schema, so this never raises: the error is shown to the model when it is
    asked again, and stored with the attempt."""
    fenced = _FENCE.search(text)
    body = fenced.group(1) if fenced else text.strip()
    if not body:
        return None, "the reply is empty"
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        return None, f"the reply is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if not isinstance(data, dict):
        return None, f"the reply must be a JSON object, got {type(data).__name__}"
    try:
        return model.model_validate(drop_nulls(data)), None
    except ValidationError as exc:
        return None, f"the reply does not fit the schema: {validation_problems(exc)}"
