"""Errors -> JSON responses, in one place, plus the request-id middleware.

Every response carries ``X-Request-ID`` (the client's, when it sends a sane one, else a new one),
and every error body is ``{"error": {"code", "message", "field"?}, "request_id"}``. Unexpected
exceptions are logged with their stack trace under the request id and answered with a generic
500: no stack trace, exception text or file path ever reaches a client.

The engine's refusals (:mod:`engine.errors`) become HTTP answers through one table,
:data:`ENGINE_REFUSALS` (:func:`engine_refusal`).

A JSON route's body sent with another ``Content-Type`` (a form, as ``curl -d`` sends) is a 415 that
names the header to send (``Content-Type: application/json``). A body that cannot be parsed at all (not UTF-8, not JSON) is a 422 ``validation_error`` on the field
``body``, like any other invalid body (the framework's own answer would be an undocumented 400), and
a body larger than ``MAX_BODY_BYTES`` (more on the search routes, which take image queries) is
refused with 413 before anything reads it (:class:`BodyLimitMiddleware`).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.errors import (
    DeadlineExceeded,
    InvalidRequest,
    ModelProcessDied,
    QueueFull,
    SearchCancelled,
)

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


@dataclass(frozen=True)
class Refusal:
    """How one kind of engine error is answered."""

    status: int
    code: str
    message: str | None  # over {capacity} and {timeout}; None: the error's own text (it names its field)
    retry_after: str | None = None
    reason: str | None = None  # qaslr_rejected_total's label


# the engine's refusals, most specific first; anything else the engine raises is a 500
ENGINE_REFUSALS: dict[type[Exception], Refusal] = {
    QueueFull: Refusal(
        429, "queue_full", "the search queue is full ({capacity} searches in progress); retry shortly", "1",
        "queue_full",
    ),
    DeadlineExceeded: Refusal(  # also engine.errors.WorkerTimeout: the wait for admission ran out
        503, "deadline_exceeded", "the search did not finish within the {timeout:g} s deadline (the server is "
        "busy or the request is large: try again, or lower shortlist/frames)", "5", "deadline",
    ),
    ModelProcessDied: Refusal(  # its backbone work was lost with the process, which restarts
        503, "model_restarting", "the model process running this search's backbone work ended and is "
        "restarting; retry shortly", "5", "model_restarting",
    ),
    SearchCancelled: Refusal(  # also engine.errors.EncodeCancelled; nobody reads this answer
        499, "client_closed_request", "the client went away; the search was stopped", None, "cancelled"
    ),
    InvalidRequest: Refusal(422, "validation_error", None),
}  # fmt: skip


def engine_refusal(
    exc: BaseException, *, capacity: int, timeout: float, rejected: Callable[[str], None] | None = None
) -> ApiError | None:
    """The HTTP answer to an engine error (None: not one of :data:`ENGINE_REFUSALS`, let it
    propagate); ``rejected(reason)`` counts it."""
    for kind, refusal in ENGINE_REFUSALS.items():
        if not isinstance(exc, kind):
            continue
        if refusal.reason is not None and rejected is not None:
            rejected(refusal.reason)
        if refusal.message is None:
            return ApiError(refusal.status, refusal.code, str(exc), field=getattr(exc, "field", None))
        headers = {"Retry-After": refusal.retry_after} if refusal.retry_after else None
        message = refusal.message.format(capacity=capacity, timeout=timeout)
        return ApiError(refusal.status, refusal.code, message, headers=headers)
    return None


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


# what a field whose value did not match its pattern must look like, in words (never the regex)
PATTERN_HELP = {
    "query": "must contain at least one character that is not white space",
    "image": "must be base64 text (letters, digits, '+', '/', '=' padding), optionally as a "
    "data:image/...;base64, URL",
    "page_token": "is not a page token this server issued: send the `next_page_token` of the previous "
    "answer unchanged",
}
FILTER_OPERATORS = ("in", "gte", "gt", "lte", "lt")
_BRANCH_NOISE = {"constrained-str", "str", "int", "float", "bool", "none"}


def _validation_message(err: dict, field: str) -> str:
    kind = err.get("type", "")
    if kind == "string_pattern_mismatch":
        return PATTERN_HELP.get(field, "is not in a form this field accepts")
    if kind == "extra_forbidden":
        return "is not a field of this request"
    if kind == "missing":
        return "is required"
    msg = str(err.get("msg", "invalid value"))
    return msg.removeprefix("Value error, ").replace("Input should be", "should be")


def _filter_condition_message(value, limits: dict) -> str:
    """What is wrong with one filter condition, from the value the client sent (pydantic reports one
    error per branch of the condition's union; a person needs the one that applies)."""
    ops = ", ".join(FILTER_OPERATORS)
    chars = limits["chars"]
    if isinstance(value, dict):
        unknown = [k for k in value if k not in FILTER_OPERATORS]
        if unknown:
            names = ", ".join(repr(k) for k in unknown)
            word = "operator" if len(unknown) == 1 else "operators"
            return (
                f"unknown {word} {names}; allowed operators: {ops} "
                '({"in": [values]} or a range such as {"gte": 10, "lt": 60}), or a plain value for equality'
            )
        if not value:
            return f"an empty condition; give one of the operators {ops}"
        if "in" in value and len(value) > 1:
            return "'in' cannot be combined with the range operators gte, gt, lte, lt"
        if "in" in value:
            values = value["in"]
            if not isinstance(values, list):
                return 'the operator \'in\' takes a list of values, e.g. {"in": ["a", "b"]}'
            if len(values) > limits["values"]:
                return f"the operator 'in' takes at most {limits['values']} values"
            return (
                f"the values of 'in' must be strings (at most {chars} characters), numbers, booleans or null"
            )
        return f"range bounds (gte, gt, lte, lt) must be numbers or strings (at most {chars} characters)"
    if isinstance(value, list):
        return 'a list is not a filter value; to match any of several values use {"in": [...]}'
    if isinstance(value, str):
        return f"a string value is at most {chars} characters"
    return (
        'a condition is a value (string, number, boolean or null), {"in": [values]}, '
        f"or a range with the operators {ops}"
    )


def _problems(errors: list[dict], body) -> list[dict]:
    """One ``{"field", "message"}`` per problem: a filter condition's union branches are folded into
    one message that says what applies, patterns are said in words, duplicates are dropped."""
    from core.config import MAX_FILTER_KEY_CHARS, MAX_FILTER_STRING_CHARS, MAX_FILTER_VALUES

    limits = {"chars": MAX_FILTER_STRING_CHARS, "values": MAX_FILTER_VALUES}
    sent = body.get("filter") if isinstance(body, dict) else None
    problems, seen = [], set()
    for err in errors:
        loc = tuple(err.get("loc", ()))
        field = _field_name(loc)
        in_body = bool(loc) and loc[0] == "body"
        if in_body and field == "filter" and len(loc) >= 3 and isinstance(loc[2], str):
            key = loc[2]
            if "[key]" in loc[3:]:
                where, message = "", f"the key {key[:40]!r} must be 1-{MAX_FILTER_KEY_CHARS} characters"
            elif isinstance(sent, dict) and key in sent:
                where, message = key, _filter_condition_message(sent[key], limits)
            else:
                noise = set(map(str, loc[3:])) & _BRANCH_NOISE
                where = ".".join(str(p) for p in loc[2:] if str(p) not in noise and not str(p)[:1].isupper())
                message = _validation_message(err, field)
        else:
            where = _where(loc) if in_body else ""
            message = _validation_message(err, field)
        if (field, where) in seen:  # one message per place: the first (most specific) one
            continue
        seen.add((field, where))
        problems.append({"field": field, "where": where, "message": message})
    return problems


NOT_JSON_MESSAGE = (
    "send the request body as JSON with the header `Content-Type: application/json` "
    "(e.g. curl -H 'Content-Type: application/json' -d '{\"query\": \"...\"}'); this request's Content-Type is "
)


def _not_json(request: Request, errors: list[dict]) -> JSONResponse | None:
    """A JSON route's body sent as something else (curl's ``-d`` alone sends a form): a 415 that says
    which header to send, instead of a validation error about the fields of a body never read."""
    sent = request.headers.get("content-type")
    if sent is None or not any(e.get("loc", ())[:1] == ("body",) for e in errors):
        return None
    media = sent.split(";")[0].strip().lower()
    if media == "application/json" or media.endswith("+json"):
        return None
    body = error_body("unsupported_media_type", NOT_JSON_MESSAGE + (media or "empty"), field="body")
    return JSONResponse(body, status_code=415)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return error_response(exc.status, exc.code, exc.message, field=exc.field, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        refused = _not_json(request, errors)
        if refused is not None:
            return refused
        problems = _problems(errors, getattr(exc, "body", None))
        if not problems:
            problems = [{"field": "body", "where": "", "message": "invalid request"}]
        fields = [
            {"field": p["field"], "message": f"{p['where']}: {p['message']}" if p["where"] else p["message"]}
            for p in problems
        ]
        first = problems[0]
        if first["field"] == "body" and any(e.get("type") == "json_invalid" for e in errors):
            message = "request body is not valid JSON"
        else:
            place = f"{first['field']}.{first['where']}" if first["where"] else first["field"]
            message = f"{place}: {first['message']}"
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
