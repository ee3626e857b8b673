"""``GET /``: the search page (plain HTML, CSS and JavaScript under ``service/static``, served by the
API itself; nothing is fetched from anywhere else, which the page's Content-Security-Policy
enforces)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
CSP = (
    "default-src 'self'; img-src 'self' data: blob:; media-src 'self'; style-src 'self'; "
    "script-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)

router = APIRouter(tags=["page"])


@router.get(
    "/",
    summary="The search page",
    description="A web page over this API: a query box with optional image upload and filters, results as "
    "cards with thumbnails, the moment in a player, relevance over time and the time spent per stage. "
    "It uses `POST /search/stream`; the API key, when the server needs one, is typed into the page and "
    "kept in the tab's sessionStorage.",
    response_class=HTMLResponse,
    responses={200: {"content": {"text/html": {}}, "description": "the page"}},
)
async def page() -> HTMLResponse:
    html = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    return HTMLResponse(html, headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache"})


def static_files() -> StaticFiles:
    """The page's scripts and styles at ``/static`` (no authentication: they are the same for everyone)."""
    return StaticFiles(directory=STATIC_DIR)
