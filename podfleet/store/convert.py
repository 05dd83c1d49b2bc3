"""Rows <-> records, by field name: a record's fields are its table's columns (the SQL
store's noun modules add only what differs, e.g. a cluster's typed status kept as JSON)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

from podfleet.store.records import ClusterStatus

R = TypeVar("R")


def row_of(r: Any, **override: Any) -> dict[str, Any]:
    """A record's row: its fields are the table's columns, by name (``override``: the
    columns kept in another form than the field)."""
    return {**{f.name: r.__dict__[f.name] for f in fields(r)}, **override}


def record_of(cls: type[R], row: object, **override: Any) -> R:
    """The record of ``row``: the columns the record's fields name (``override``: fields
    read from the row in another form)."""
    values = {f.name: getattr(row, f.name) for f in fields(cls) if f.name not in override}  # type: ignore[arg-type]
    return cls(**values, **override)


def cluster_status_json(s: ClusterStatus) -> dict[str, Any]:
    """The JSON column's form: the fields that are set (the shape rows had as a dict)."""
    return {f.name: copy.deepcopy(v) for f in fields(s) if (v := s.__dict__[f.name]) is not None}


def cluster_status(d: Mapping[str, Any] | None) -> ClusterStatus:
    """A stored status back; keys this version does not know are left out (an old row loads)."""
    d = d or {}
    spares, original = d.get("spares"), d.get("original_spares")
    connected = d.get("fabric_connected")
    return ClusterStatus(
        reason=str(d.get("reason") or ""), deployment=copy.deepcopy(d.get("deployment")),
        spares=None if spares is None else [int(c) for c in spares],
        original_spares=None if original is None else [int(c) for c in original],
        chip_modes=copy.deepcopy(d.get("chip_modes")),
        fabric_connected=None if connected is None else bool(connected),
        links=None if (links := d.get("links")) is None else {str(k): str(v) for k, v in links.items()},
    )
