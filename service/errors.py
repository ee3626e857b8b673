"""Errors -> JSON responses, in one place, plus the request-id middleware.

Every response carries ``X-Request-ID`` (the client's, when it sends a sane one, else a new one),
and every error body is ``{"error": {"code", "message", "field"?}, "request_id"}``. Unexpected
exceptions are logged with their stack trace under the request id and answered with a generic
500: no stack trace, exception text or file path ever reaches a client.

A body that cannot be parsed at all (not UTF-8, not JSON) is a 422 ``validation_error`` on the field
``body``, like any other invalid body (the framework's own answer would be an undocumented 400), and
a body larger than ``MAX_BODY_BYTES`` (more on the search routes, which take image queries) is
refused with 413 before anything reads it (:class:`BodyLimitMiddleware`).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from contextvars import ContextVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = "X-Request-ID"
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
request_id_var: ContextVar[str] = ContextVar("request_id", default="-")


class ApiError(Exception):
    """An error with a status, a stable code and a client-safe message."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers or {}


def error_body(code: str, message: str, *, field: str | None = None) -> dict:
    err = {"code": code, "message": message}
    if field is not None:
        err["field"] = field
    return {"error": err, "request_id": request_id_var.get()}


def error_response(status: int, code: str, message: str, *, field=None, headers=None) -> JSONResponse:
    return JSONResponse(error_body(code, message, field=field), status_code=status, headers=headers)


def _field_name(loc) -> str:
    """The request field an error is about: the top-level field (a problem deep inside ``filter`` is
    reported on ``filter``; the message carries the detail), or ``body`` for the body as a whole."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):  # where, not which field
        parts = parts[1:]
    if not parts or not isinstance(parts[0], str):  # e.g. a JSON decode error at a character offset
        return "body"
    return parts[0]


def _where(loc) -> str:
    """Where inside the field, for the message (union branch names left out)."""
    parts = [str(p) for p in list(loc)[2:] if not (isinstance(p, str) and p[:1].isupper())]
    return ".".join(parts)


def _validation_message(err: dict) -> str:
    msg = str(err.get("msg", "invalid value"))
    return msg.removeprefix("Value error, ")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return error_response(exc.status, exc.code, exc.message, field=exc.field, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        fields = []
        for err in errors:
            loc = err.get("loc", ())
            where = _where(loc) if loc and loc[0] == "body" else ""
            message = _validation_message(err)
            fields.append({"field": _field_name(loc), "message": f"{where}: {message}" if where else message})
        if not fields:
            fields = [{"field": "body", "message": "invalid request"}]
        first = fields[0]
        if first["field"] == "body" and any(e.get("type") == "json_invalid" for e in errors):
            message = "request body is not valid JSON"
        else:
            message = f"{first['field']}: {first['message']}"
        body = error_body("validation_error", message, field=first["field"])
        body["error"]["fields"] = fields
        return JSONResponse(body, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 400:  # the framework could not parse the body (e.g. not UTF-8)
            body = error_body("validation_error", "request body is not valid UTF-8 JSON", field="body")
            body["error"]["fields"] = [{"field": "body", "message": "could not be parsed"}]
            return JSONResponse(body, status_code=422)
        code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(
            exc.status_code, "http_error"
        )
        detail = exc.detail if isinstance(exc.detail, str) else "request failed"
        return error_response(exc.status_code, code, detail, headers=getattr(exc, "headers", None))


class BodyLimitMiddleware:
    """Pure ASGI middleware: a request body longer than ``max_bytes`` is answered with 413 before the
    application sees it (by its Content-Length, or while it streams in without one); smaller
    bodies are passed on unchanged."""

    def __init__(self, app, *, max_bytes: int, limits: dict[str, int] | None = None):
        self.app = app
        self.default_bytes = int(max_bytes)
        self.limits = {path: int(n) for path, n in (limits or {}).items()}  # per path (image queries)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        max_bytes = self.limits.get(scope.get("path", ""), self.default_bytes)
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = max_bytes + 1
                if declared > max_bytes:
                    return await self._refuse(send, max_bytes)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return await self.app(scope, _replay([message]), send)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_bytes:
                return await self._refuse(send, max_bytes)
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([body], then=receive), send)

    async def _refuse(self, send, max_bytes: int) -> None:
        payload = json.dumps(
            error_body("body_too_large", f"the request body is larger than {max_bytes} bytes", field="body")
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})


def _replay(messages: list, *, then=None):
    pending = list(messages)

    async def receive():
        if pending:
            return pending.pop(0)
        if then is not None:
            return await then()  # after the body: the disconnect message, when it comes
        return {"type": "http.disconnect"}

    return receive


class RequestIdMiddleware:
    """Pure ASGI middleware: assigns the request id, adds it to every response, and turns any
    exception that escaped the handlers into a generic JSON 500 (logged with the stack)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        incoming = None
        for name, value in scope.get("headers", []):
            if name == b"x-request-id":
                incoming = value.decode("latin-1")
                break
        rid = incoming if incoming and _SAFE_ID.match(incoming) else uuid.uuid4().hex[:16]
        token = request_id_var.set(rid)
        scope.setdefault("state", {})["request_id"] = rid
        started = False

        async def send_with_id(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                headers.append((b"x-request-id", rid.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            logger.exception(
                "unhandled error in request %s %s (request id %s)",
                scope.get("method"),
                scope.get("path"),
                rid,
            )
            if started:
                raise
            body = json.dumps(
                error_body("internal_error", f"internal server error (request id {rid})")
            ).encode()
            await send_with_id(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send_with_id({"type": "http.response.body", "body": body})
        finally:
            request_id_var.reset(token)
