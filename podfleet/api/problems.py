"""RFC 9457 problem+json: every error, mapped once from ``podfleet.errors``.

Body: ``type``, ``title``, ``status``, ``detail``, ``code`` (stable), and where known
``field`` and ``allowed``. FastAPI's validation errors and unknown routes are mapped
here too, so bad input is always a 4xx problem, never a 500 or a bare ``{"detail"}``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from podfleet.api.wirenames import RENAMED
from podfleet.errors import PodfleetError
from podfleet.fabric.factory import library_error
from podfleet.validation import first_refusal

log = logging.getLogger("podfleet.api")
MEDIA_TYPE = "application/problem+json"
TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
          405: "Method Not Allowed", 409: "Conflict", 415: "Unsupported Media Type",
          422: "Unprocessable Content", 429: "Too Many Requests", 500: "Internal Server Error"}
_HTTP_CODES = {404: "not-found", 405: "method-not-allowed", 401: "unauthorized", 403: "forbidden",
               415: "unsupported-media-type"}


def problem(status: int, code: str, detail: str, *, field: str | None = None,
            allowed: object = None, headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"type": f"urn:podfleet:problem:{code}", "title": TITLES.get(status, "Error"),
                            "status": status, "detail": detail, "code": code}
    if field is not None:
        body["field"] = field
    if allowed is not None:
        body["allowed"] = allowed
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def from_error(exc: PodfleetError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.http_status == 401 else None
    wait = exc.extra.get("retry_after_s")
    if isinstance(wait, int | float):
        headers = {"Retry-After": f"{max(1, round(wait))}"}
    # The engine still names some fields in their old camelCase spelling: the problem names
    # the one the wire uses now (api/wirecase.py).
    field = RENAMED.get(exc.field, exc.field) if exc.field is not None else None
    return problem(exc.http_status, exc.code, exc.message, field=field,
                   allowed=exc.extra.get("allowed"), headers=headers)


def _validation_field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    # Union members show up as their type name in the location: not part of the field.
    parts = [p for p in parts if not p.startswith(("function-", "constrained-", "literal[", "list[", "dict[",
                                                           "Parallelism", "ModelDims"))
             and p not in ("int", "str", "float", "bool", "list[int]", "[key]")]
    return ".".join(parts) or "body"


def _allowed_from_schema(req: Request, field: str) -> Any:
    """Allowed values of a body field from its JSON schema: enum, or min-max range."""
    route = req.scope.get("route")
    dependant = getattr(route, "dependant", None)
    for param in [*getattr(dependant, "query_params", []), *getattr(dependant, "path_params", [])]:
        if param.alias == field:
            meta = param.field_info.metadata
            lo = next((m.ge for m in meta if hasattr(m, "ge")), None)
            hi = next((m.le for m in meta if hasattr(m, "le")), None)
            return f"{lo}-{hi}" if lo is not None and hi is not None else None
    body = getattr(route, "body_field", None)
    model = getattr(getattr(body, "field_info", None), "annotation", None)
    if model is None or not hasattr(model, "model_json_schema") or "." in field:
        return None
    props = model.model_json_schema().get("properties", {})
    if field not in props:  # an unknown field: the fields there are
        return sorted(props)
    prop = props[field]
    options = prop.get("anyOf", [prop])
    # A union of names (FaultKind | 'kill-worker') allows every member's names.
    names = [v for o in options for v in (o.get("enum") or ([o["const"]] if "const" in o else []))]
    if names and all("enum" in o or "const" in o or o.get("type") == "null" for o in options):
        return names
    for o in options:
        if "enum" in o:
            return list(o["enum"])
        lo, hi = o.get("minimum"), o.get("maximum")
        if lo is not None and hi is not None:
            return f"{lo}-{hi}"
    return None


METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def allowed_methods(req: Request) -> list[str]:
    """Every method some route of the app serves on the request's path (the ``Allow`` of a
    405), asked of the router itself, so included routers count too."""
    routes = req.app.router.routes
    return [m for m in METHODS
            if any(route.matches({**req.scope, "method": m})[0] == Match.FULL for route in routes)]


def install(app: FastAPI) -> None:
    @app.exception_handler(PodfleetError)
    async def _podfleet(_req: Request, exc: PodfleetError) -> JSONResponse:
        if exc.http_status >= 500:
            log.error("internal error: %s", exc.message)
        return from_error(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(req: Request, exc: RequestValidationError) -> JSONResponse:
        # One sentence that names the field, the value, what is allowed and the fix
        # (podfleet.validation), never pydantic's own words.
        out = first_refusal(exc.errors(), lambda e: _validation_field(tuple(e.get("loc", ()))),
                            lambda f: _allowed_from_schema(req, f))
        hook = getattr(req.app.state, "on_invalid", None)
        if hook is not None:
            await hook(req, out.message)
        return problem(400, "invalid-input", out.message, field=out.field, allowed=out.allowed)

    @app.exception_handler(StarletteHTTPException)
    async def _http(req: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http-error")
        detail = str(exc.detail)
        headers = getattr(exc, "headers", None)
        if exc.status_code == 404 and detail == "Not Found":
            detail = "no such route; see /openapi.json"
        if exc.status_code == 405:
            # Starlette names only the first route that matched the path; a path has one
            # route per method, so the answer lists them all.
            methods = allowed_methods(req)
            detail = f"{req.method} is not allowed on {req.url.path}; allowed: {', '.join(methods)}"
            return problem(405, code, detail, field="method", allowed=methods,
                           headers={**(headers or {}), "Allow": ", ".join(methods)})
        return problem(exc.status_code, code, detail, headers=headers)

    @app.exception_handler(Exception)
    async def _bug(_req: Request, exc: Exception) -> JSONResponse:
        mapped = library_error(exc)
        if mapped is not None:  # a fabric library's refusal with a fix to name, not a bug
            log.error("%s", mapped.message)
            return from_error(mapped)
        log.exception("unhandled error")
        return problem(500, "internal", f"internal error ({type(exc).__name__}); see the server log")
