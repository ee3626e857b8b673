"""Liveness, readiness and Prometheus metrics (no authentication: probes and scrapers)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service.honesty import backbone_warnings, is_shapes_world
from service.state import AppState, get_state

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="The process is alive")
async def healthz() -> dict:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="The model and index are loaded",
    responses={
        200: {
            "description": "ready; `random_weights` and `shapes_world` say whether rankings mean anything "
            "for real video (`warning` then says why they do not)",
            "content": {
                "application/json": {
                    "example": {"status": "ready", "random_weights": False, "shapes_world": False}
                }
            },
        },
        503: {"content": {"application/json": {"example": {"status": "loading"}}}},
    },
)
async def readyz(state: AppState = Depends(get_state)):
    if state.engine is None:
        body = {"status": state.status}
        if state.error:
            body["error"] = state.error
        return JSONResponse(body, status_code=503, headers={"Retry-After": "2"})
    engine = state.engine
    body = {
        "status": "ready",
        "random_weights": bool(engine.random_weights),
        "shapes_world": is_shapes_world(engine),
        **engine.info,
    }
    warnings = backbone_warnings(engine)
    if warnings:
        body["warning"] = "; ".join(warnings)
    return body


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(state: AppState = Depends(get_state)) -> Response:
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
