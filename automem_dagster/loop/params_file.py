"""``params.yaml``, the DVC pipeline's parameters, as the options of ``ProficiencyConfig`` that have a ``param`` key.

``automem params`` writes the file from a config (``params_of``) and every command's ``--settings`` reads it
back (``options_of_params``), so the file holds no default and no help of its own (``loop/settings.py``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from automem_dagster.loop.settings import ProficiencyConfig
from automem_dagster.options import leaves, nest, value_at


def params_of(config: ProficiencyConfig) -> dict[str, dict]:
    """The options that have a ``params.yaml`` key, in that file's sections; None as "" (a DVC parameter
    is substituted into a command line, where only an empty value can say none)."""
    sections: dict[str, dict] = {}
    for leaf in leaves(type(config)).values():
        if leaf.param:
            section, _, name = leaf.param.partition(".")
            value = value_at(config, leaf)
            sections.setdefault(section, {})[name] = "" if value is None else value
    return sections


def options_of_params(path: Path) -> dict[str, object]:
    """The option values a ``params.yaml`` sets, by option key (``gate.level``; "" read as none), checked by the
    config: a bad value is refused naming the file, the key and what the config allows."""
    import yaml

    data = yaml.safe_load(Path(path).read_text()) or {}
    by_param = {leaf.param: leaf.key for leaf in leaves(ProficiencyConfig).values() if leaf.param}
    values = {}
    for param, key in by_param.items():
        section, _, name = param.partition(".")
        if name in (data.get(section) or {}):
            given = data[section][name]
            values[key] = None if given == "" else given
    try:
        ProficiencyConfig.model_validate(nest(values))
    except ValidationError as exc:
        where = {key: param for param, key in by_param.items()}
        faults = "; ".join(f"{where.get('.'.join(map(str, e['loc'])), '.'.join(map(str, e['loc'])) or 'the settings')}: "
                           f"{e['msg']}" for e in exc.errors())
        raise ValueError(f"{path}: {faults} (automem params --help lists every setting)") from exc
    return values
