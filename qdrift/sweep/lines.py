"""YAML loading that remembers line numbers, so a bad sweep file error can point at its line.

`load_yaml` returns ordinary dicts and lists (subclasses) that also carry `.line` (where the
mapping or list starts) and `.lines` (the line of each key or item); all lines are 1-based.
"""

from __future__ import annotations

from typing import Any

import yaml


class LineDict(dict):
    line: int = 0

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.lines: dict[Any, int] = {}

    def line_of(self, key) -> int:
        return self.lines.get(key, self.line)


class LineList(list):
    line: int = 0

    def __init__(self, *args):
        super().__init__(*args)
        self.lines: list[int] = []

    def line_of(self, index: int) -> int:
        return self.lines[index] if index < len(self.lines) else self.line


class _Loader(yaml.SafeLoader):
    """SafeLoader whose mappings and sequences record the lines of their keys and items."""


def _mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)  # YAML merge keys (<<) as SafeLoader handles them
    out = LineDict()
    out.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first on line {out.lines[key]})", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = line
    return out


def _sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    out = LineList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.lines = [child.start_mark.line + 1 for child in node.value]
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _sequence)


def load_yaml(text: str) -> Any:
    """Parse YAML text (safe tags only) into LineDict / LineList / scalars."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
