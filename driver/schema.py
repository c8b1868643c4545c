"""The one strict loading layer for every configuration file the kit reads, and the base of
every file format it writes.

Matrices, inventories, ``source.yaml`` files, ``images.lock`` and release manifests are read by
:func:`load_document` and checked by pydantic models (:class:`StrictModel`) through
:func:`validate`. Whatever is wrong becomes one :class:`ConfigError` naming the file, the field
path (``suites[0].batch_size[2]``) and what is allowed; never a traceback, never a silent
acceptance. The kit's own files (repeat records, results files) are models of the same base,
read with :func:`strict_json`, their ``schema`` checked by :func:`schema_version`.

The loader refuses what PyYAML / ``json`` would otherwise let through:

* a missing file or a directory, bytes that are not UTF-8, a file over :data:`MAX_BYTES`;
* a key given twice in one mapping, at any depth (the last one would win silently);
* alias expansion beyond :data:`MAX_EXPANDED_NODES` nodes (a "billion laughs" file is refused
  before anything is built from it) and recursive aliases;
* NaN and infinity anywhere (``.nan``, ``.inf``, JSON ``NaN``): no number of a config may be one.

Patterns are full matches (``re.fullmatch`` / ``\\A...\\Z``): ``$`` also matches before a final
newline, so ``"eth0\\n"`` would pass a ``^...$`` check.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from driver.text import check_free_text, unsafe_character

MAX_BYTES = 8 * 1024 * 1024
MAX_EXPANDED_NODES = 200_000  # YAML nodes after alias expansion (a real matrix has < 2,000)
MAX_DEPTH = 100

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A bad configuration file or value: ``<file>: <field path>: <what is wrong; the fix>``."""

    def __init__(self, path: Path | str, field_path: str, message: str) -> None:
        super().__init__(f"{path}: {field_path}: {message}")
        self.path, self.field_path, self.message = str(path), field_path, message


class StrictModel(BaseModel):
    """Base of every model the kit reads or writes (config schemas, records, results files):
    unknown keys refused, no type coercion, finite numbers, frozen."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


def schema_version(known: tuple[int, ...]) -> Any:
    """The type of a kit file's ``schema`` field: one of the ``known`` versions, else an error
    that says which this kit reads and what to do."""

    def check(value: Any) -> Any:
        if value not in known:
            raise ValueError(
                f"schema version {value!r} is not one this kit reads "
                f"({', '.join(map(str, known))}): written by another kit; read it with that "
                "kit, or upgrade this one"
            )
        return value

    return Annotated[int, BeforeValidator(check)]


def _finite_number(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text} overflows to infinity")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a kit's file may hold")


def strict_json(text: str | bytes, *, numbers_as_text: bool = False) -> Any:
    """JSON without NaN or infinity anywhere (Python's json module accepts both).
    ``numbers_as_text``: every non-integer number as the text it is written as (to compare
    numbers as published)."""
    parse_float = str if numbers_as_text else _finite_number
    return json.loads(text, parse_float=parse_float, parse_constant=_no_constant)


FiniteFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]


def fullmatch(pattern: str | re.Pattern[str], text: str) -> bool:
    return re.fullmatch(pattern, text) is not None


def one_of(*allowed: Any) -> AfterValidator:
    """A value equal to one of ``allowed`` (type included: ``True`` is not ``1``)."""

    def check(value: Any) -> Any:
        if not any(value == a and type(value) is type(a) for a in allowed):
            shown = ", ".join(str(a) for a in allowed)
            raise ValueError(
                f"{_shown(value)} is not allowed{did_you_mean(str(value), map(str, allowed))}; "
                f"allowed values: {shown}"
            )
        return value

    return AfterValidator(check)


def text(pattern: str, what: str, *, numbers: bool = False) -> Any:
    """A string fully matching ``pattern`` (Python ``re.fullmatch``); ``numbers``: an int or
    float is taken as its text (``gpus: 2``, ``memory: 512``)."""

    def check(value: Any) -> str:
        if numbers and type(value) in (int, float):
            value = str(value)
        if not isinstance(value, str) or re.fullmatch(pattern, value) is None:
            raise ValueError(f"must be {what}, got {_shown(value)}")
        return value

    return Annotated[Any, AfterValidator(check)]


def number(low: float, high: float, what: str, *, integer: bool = True) -> Any:
    """An int (or, unless ``integer``, a finite float) in ``[low, high]``; never a bool."""

    def check(value: Any) -> Any:
        kinds = (int,) if integer else (int, float)
        if type(value) not in kinds or not low <= value <= high:
            raise ValueError(f"must be {what}, got {_shown(value)}")
        return value

    return Annotated[Any, AfterValidator(check)]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a close spelling exists, else ``""``."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def field_path(loc: Iterable[Any]) -> str:
    """``("suites", 0, "batch_size", 2)`` -> ``suites[0].batch_size[2]``."""
    out = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker for a bad mapping key: the key names it already
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(file)"


# Shared field types: patterns are whole-text matches (re.fullmatch), never "^...$".
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}"
Name = text(NAME_PATTERN, "a name: letters, digits, _ . - (starting with a letter or digit)")


def one_line(what: str) -> Any:
    """A string without control or format characters (Unicode Cc, Cf, Zl, Zp: a newline splits
    a table row or a YAML line a command is rendered from, U+202E reverses what follows, a
    zero-width character makes two names look alike): ``driver.text.unsafe_character``."""

    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"must be {what}, got {_shown(value)}")
        found = unsafe_character(value)
        if found:
            raise ValueError(f"must be {what}; it holds {found}: remove it")
        return value

    return Annotated[Any, AfterValidator(check)]


Line = one_line("one line of text (no newline, control or format character)")
# A link a table shows: http(s) only (no javascript: or data: link in a README), one line.
Url = Annotated[
    text(r"https?://[^\s\x00-\x1f\x7f-\x9f\u2028\u2029]+", "an http(s) URL"),
    AfterValidator(lambda value: check_free_text(value, "url")),
]
Count = number(1, 1_000_000, "a whole number from 1")  # nodes, devices, a batch per device
OptionName = text(r"[A-Za-z_][A-Za-z0-9_]{0,62}", "an option name: letters, digits, _")


# Reading -------------------------------------------------------------------------------------


def stat_of(path: Path, field: str = "(file)", missing: str = "does not exist") -> os.stat_result:
    """``path``'s status (symlinks followed), or a ConfigError naming it: ``missing`` where it
    does not exist, the system's reason where it cannot be read."""
    try:
        return path.stat()
    except FileNotFoundError:
        raise ConfigError(path, field, missing) from None
    except OSError as error:
        raise ConfigError(path, field, f"cannot be read: {error.strerror}") from None


def read_text(path: Path | str) -> str:
    path = Path(path)
    if path.is_dir():
        raise ConfigError(path, "(file)", "is a directory; give the path of a file")
    size = stat_of(path).st_size
    if size > MAX_BYTES:
        raise ConfigError(path, "(file)", f"is {size} bytes; a config file is at most {MAX_BYTES}")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(path, "(file)", f"cannot be read: {error.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ConfigError(
            path,
            "(file)",
            f"is not UTF-8 text (byte 0x{data[error.start]:02x} on line {line}); save it as UTF-8",
        ) from None


def _check_nodes(path: Path, root: yaml.Node) -> None:
    """Duplicate keys, recursion, depth and the expanded size of a composed YAML document."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ConfigError(path, f"line {node.start_mark.line + 1}", "a recursive alias")
        if depth > MAX_DEPTH:
            raise ConfigError(
                path, f"line {node.start_mark.line + 1}", f"nested deeper than {MAX_DEPTH} levels"
            )
        active.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], int] = {}
            for key_node, value_node in node.value:
                merge = key_node.tag == "tag:yaml.org,2002:merge"
                if isinstance(key_node, yaml.ScalarNode) and not merge:
                    ident = (key_node.tag, key_node.value)
                    line = key_node.start_mark.line + 1
                    if ident in seen:
                        raise ConfigError(
                            path,
                            f"line {line}",
                            f"key {key_node.value!r} is given twice (also on line {seen[ident]}); "
                            "a mapping names each key once",
                        )
                    seen[ident] = line
                total += size(key_node, depth + 1) + size(value_node, depth + 1)
                if total > MAX_EXPANDED_NODES:
                    break
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                total += size(item, depth + 1)
                if total > MAX_EXPANDED_NODES:
                    break
        if total > MAX_EXPANDED_NODES:
            raise ConfigError(
                path,
                f"line {node.start_mark.line + 1}",
                f"expands to more than {MAX_EXPANDED_NODES} values (YAML aliases); "
                "write the values out instead of nesting aliases",
            )
        active.discard(key)
        sizes[key] = total
        return total

    size(root, 0)


def check_finite(path: Path | str, data: Any, where: tuple[Any, ...] = ()) -> None:
    """Refuse NaN and infinity anywhere in a parsed document."""
    if isinstance(data, float) and not math.isfinite(data):
        raise ConfigError(
            path, field_path(where), f"{data!r} is not a number here; give a finite number"
        )
    if isinstance(data, dict):
        for key, value in data.items():
            check_finite(path, value, (*where, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            check_finite(path, value, (*where, index))


def _too_deep(mark: Any) -> yaml.scanner.ScannerError:
    return yaml.scanner.ScannerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing deep nesting while scanning (``[[[[...`` would otherwise
    be read to the end before the composer's recursion fails)."""

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:  # noqa: N803 - PyYAML's name
        if self.flow_level >= MAX_DEPTH:
            raise _too_deep(self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def add_indent(self, column: int) -> bool:  # block nesting, by indentation
        if len(self.indents) >= MAX_DEPTH:
            raise _too_deep(self.get_mark())
        return super().add_indent(column)


# libyaml's parser, where PyYAML was built with it: the same nodes as the pure-Python one, ten
# times faster (every command reads the source specs, matrices and published figures).
_C_LOADER: Any = getattr(yaml, "CSafeLoader", None)
_OPENING = (
    yaml.FlowSequenceStartToken,
    yaml.FlowMappingStartToken,
    yaml.BlockSequenceStartToken,
    yaml.BlockMappingStartToken,
)
_CLOSING = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)


def _check_depth(text: str) -> None:
    """libyaml composes a document by recursing in C with no limit (a deep enough ``[[[[``
    crashes the interpreter), so its tokens are counted first, the scan stopping at the limit."""
    scanner = _C_LOADER(text)
    depth = 0
    try:
        while (token := scanner.get_token()) is not None:
            if isinstance(token, _OPENING):
                depth += 1
                if depth > MAX_DEPTH:
                    raise _too_deep(token.start_mark)
            elif isinstance(token, _CLOSING):
                depth -= 1
    finally:
        scanner.dispose()


def parse_yaml(text: str, path: Path | str) -> Any:
    path = Path(path)
    loader = None
    try:
        if _C_LOADER is not None:
            _check_depth(text)
        loader = (_C_LOADER or _Loader)(text)
        root = loader.get_single_node()
        if root is None:
            return None
        _check_nodes(path, root)
        data = loader.construct_document(root)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(file)"
        problem = getattr(error, "problem", None) or " ".join(str(error).split())
        raise ConfigError(path, where, f"is not valid YAML: {problem}") from None
    except RecursionError:
        raise ConfigError(path, "(file)", f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        if loader is not None:
            loader.dispose()
    check_finite(path, data)
    return data


def parse_json(text: str, path: Path | str) -> Any:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ConfigError(path, key, "is given twice in one object; name each key once")
            out[key] = value
        return out

    def no_constant(name: str) -> Any:
        raise ConfigError(path, "(file)", f"{name} is not a number; give a finite number")

    try:
        data = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except json.JSONDecodeError as error:
        raise ConfigError(path, f"line {error.lineno}", f"is not valid JSON: {error.msg}") from None
    except RecursionError:
        raise ConfigError(path, "(file)", "nested too deeply") from None
    check_finite(path, data)
    return data


def load_document(path: Path | str) -> Any:
    """A YAML (or JSON: ``*.json``) file, parsed strictly (see the module docstring)."""
    path = Path(path)
    text = read_text(path)
    if path.suffix == ".json":
        return parse_json(text, path)
    return parse_yaml(text, path)


# Validation ----------------------------------------------------------------------------------


def _strip(annotation: Any) -> Any:
    """Drop Annotated and Optional wrappers (``list[X] | None`` -> ``list[X]``)."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _parent_model(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose field names the last part of ``loc`` (for "allowed keys")."""
    current: Any = model
    parts = list(loc[:-1])
    while parts:
        part = parts.pop(0)
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        info: FieldInfo | None = current.model_fields.get(part) if isinstance(part, str) else None
        if info is None:
            return None
        annotation = _strip(info.annotation)
        if typing.get_origin(annotation) in (list, dict):
            if parts:
                parts.pop(0)  # the index or key
            annotation = _strip(typing.get_args(annotation)[-1])
        current = annotation
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def describe_error(model: type[BaseModel], error: Mapping[str, Any]) -> tuple[str, str]:
    """(field path, message with the fix) for one pydantic error."""
    loc = tuple(error.get("loc", ()))
    kind = error.get("type", "")
    where = field_path(loc)
    if kind == "extra_forbidden":
        parent = _parent_model(model, loc)
        allowed = sorted(f.alias or n for n, f in parent.model_fields.items()) if parent else []
        hint = did_you_mean(str(loc[-1]), allowed)
        return where, f"unknown key{hint}; allowed keys: {', '.join(allowed)}"
    if kind == "missing":
        return where, "missing; this key is required"
    message = str(error.get("msg", "invalid"))
    if message.startswith("Value error, "):
        return where, message[len("Value error, ") :]
    if message.startswith("Assertion failed, "):
        message = message[len("Assertion failed, ") :]
    if kind == "too_short":
        return where, "is empty; give a non-empty list or mapping"
    message = re.sub(r" or instance of \w+", "", message)
    return where, f"{message}, got {_shown(error.get('input'))}"


def error_from(path: Path | str, model: type[BaseModel], error: ValidationError) -> ConfigError:
    errors = error.errors()
    where, message = describe_error(model, errors[0])
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return ConfigError(path, where, message)


def validate(
    model: type[M], data: Any, path: Path | str, context: Mapping[str, Any] | None = None
) -> M:
    """``model`` from parsed data; any problem is one :class:`ConfigError` for ``path``.
    NaN and infinity are refused anywhere in ``data``, also where a model takes any value."""
    check_finite(path, data)
    try:
        return model.model_validate(data, context=dict(context or {}))
    except ValidationError as error:
        raise error_from(path, model, error) from None
