"""Which operation a request is for, known from its method and path alone (the guard asks
before routing, so before any body is read).

FastAPI keeps included routers as nested route groups, resolved only when a request is
dispatched: a route found by ``route.matches`` on the app's top-level routes carries no
``operationId``. This walks every route of the app (``fastapi.routing.iter_route_contexts``
where FastAPI nests them; the flat list in versions that do not) into one table of
compiled paths, rebuilt when the app's routes change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from starlette.routing import compile_path

NO_SUCH_ROUTE = "NoSuchRoute"  # the audit's action for a path no route serves


@dataclass(frozen=True)
class Operation:
    id: str  # the route's operationId
    path: str  # its path template, /v1/clusters/{cluster}
    methods: frozenset[str]
    regex: re.Pattern[str]


def operations(routes: Iterable[Any]) -> list[Operation]:
    """Every route with an operationId, in the router's order (the first match wins)."""
    out = []
    for r in _flat(list(routes)):
        op, path, methods = getattr(r, "operation_id", None), getattr(r, "path", None), getattr(r, "methods", None)
        if op and path and methods:
            out.append(Operation(op, path, frozenset(methods), compile_path(path)[0]))
    return out


def _flat(routes: list[Any]) -> list[Any]:
    try:  # FastAPI versions that nest included routers
        from fastapi.routing import iter_route_contexts
    except ImportError:  # older ones: the app's routes are already flat
        return routes
    return list(iter_route_contexts(routes))


class RouteMap:
    """Method and path -> operationId for one app (what ``authorize`` reads after routing)."""

    def __init__(self) -> None:
        self._routes: list[Any] | None = None
        self._by_method: dict[str, list[Operation]] = {}

    def operation(self, app: Any, method: str, path: str) -> str | None:
        """The operation this request is for; None when no route serves its path and method."""
        routes = app.router.routes
        if self._routes is None or len(routes) != len(self._routes):
            self._build(routes)
        for op in self._by_method.get(method, ()):
            if op.regex.match(path):
                return op.id
        return None

    def _build(self, routes: list[Any]) -> None:
        # Keyed on the top-level routes: a console mounted after ``create_app`` adds some.
        self._routes = list(routes)
        by_method: dict[str, list[Operation]] = {}
        for op in operations(routes):
            for m in op.methods:
                by_method.setdefault(m, []).append(op)
        self._by_method = by_method
