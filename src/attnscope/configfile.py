"""The config file before the plan: YAML read strictly (a duplicate key or a syntax error named
by file and line) and validated against the JSON schema, which fills the defaults
(:func:`attnscope.config.plan` then cross-checks what the schema cannot). Cheap to import: the
Snakefile runs it on every invocation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from attnscope import architecture
from attnscope.config import ConfigError


def dotted(path: Any) -> str:
    """``['experiments', 'a', 'k']`` → ``experiments.a.k`` (list indices as ``[i]``)."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it: the Snakefile reads the config and the
schema on every invocation, and the pure-Python loader takes several times as long."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate mapping keys (YAML silently keeps the last)."""


class _FastUniqueKeyLoader(FAST_LOADER):
    """:class:`_UniqueKeyLoader` on :data:`FAST_LOADER` (its syntax errors say less: the pure-Python
    loader reads a file again to name a syntax error)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(
                f"{node.start_mark.name}:{key_node.start_mark.line + 1}: duplicate key {key!r} "
                f"(first on line {seen[key]}); each key, e.g. each experiment name, may appear once: "
                "rename or remove one of them"
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


for _loader in (_UniqueKeyLoader, _FastUniqueKeyLoader):
    _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def check_yaml_file(path: str | Path) -> None:
    """Raise :class:`ConfigError` if a YAML config file is not valid YAML (its file, line and
    column: Snakemake's own message has neither) or repeats a key."""
    for loader in (_FastUniqueKeyLoader, _UniqueKeyLoader):  # the second words a syntax error
        with open(path, encoding="utf-8") as handle:
            try:
                yaml.load(handle, Loader=loader)  # noqa: S506 - SafeLoader subclasses
                return
            except yaml.MarkedYAMLError as exc:
                error = exc
    mark = error.problem_mark or error.context_mark
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
    context = f" ({error.context} on line {error.context_mark.line + 1})" if error.context_mark else ""
    raise ConfigError(
        f"{where}: not valid YAML: {error.problem}{context}; fix that line (indent with spaces, "
        "not tabs; quote a value that holds ': ' or ' #')"
    )


def load_schema(path: str | Path) -> dict[str, Any]:
    """The schema, a tiny random model's ``architecture`` enum filled from the declared families."""
    with open(path, encoding="utf-8") as handle:
        schema = yaml.load(handle, Loader=FAST_LOADER)  # noqa: S506 - a safe loader
    schema["definitions"]["model"]["properties"]["architecture"]["enum"] = architecture.tiny_architectures()
    return schema


def _set_defaults(validator: Any, properties: dict, instance: Any, schema: dict) -> Iterator[Any]:
    """The ``properties`` keyword, filling each absent property's ``default`` first (jsonschema's
    FAQ recipe, which ``snakemake.utils.validate`` runs; here on the schema already read)."""
    if isinstance(instance, dict):
        for name, subschema in properties.items():
            if "default" in subschema:
                instance.setdefault(name, subschema["default"])
    yield from jsonschema.Draft202012Validator.VALIDATORS["properties"](
        validator, properties, instance, schema
    )


_FillingValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"properties": _set_defaults}
)


def validate(config: dict[str, Any], schema_path: str | Path) -> None:
    """Check ``config`` against the schema (all errors, with key paths), then fill defaults."""
    schema = load_schema(schema_path)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [f"  {dotted(e.absolute_path)}: {_message(e)}" for e in errors]
        raise ConfigError("invalid config:\n" + "\n".join(lines))
    _FillingValidator(schema).validate(config)


def _message(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        return f"{error.message}; allowed keys: {', '.join(allowed)}" if allowed else error.message
    return error.message
