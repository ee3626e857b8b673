"""The OpenAPI docs pages, ``GET /docs`` (Swagger UI) and ``GET /redoc`` (ReDoc), served from this
server's own assets at ``/docs-assets``: nothing is fetched from a CDN, so the docs work offline.

The assets (Swagger UI 5 and ReDoc, which render OpenAPI 3.1) come from the PyPI package
``fastapi-offline`` (a dependency; only its ``static`` folder is used). Where it is missing, both
pages say so and link the raw document instead of showing a blank page.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

logger = logging.getLogger(__name__)

ASSETS_URL = "/docs-assets"
SWAGGER_JS = "swagger-ui-bundle.js"
SWAGGER_CSS = "swagger-ui.css"
REDOC_JS = "redoc.standalone.js"
FAVICON = "favicon.png"
# no validator badge (it would call an outside service); the rest is FastAPI's default layout
SWAGGER_PARAMETERS = {"validatorUrl": None}


def assets_dir() -> Path | None:
    """The folder holding the Swagger UI and ReDoc bundles, or None when the package is missing."""
    try:
        import fastapi_offline
    except ImportError:
        return None
    folder = Path(fastapi_offline.__file__).resolve().parent / "static"
    if all((folder / name).is_file() for name in (SWAGGER_JS, SWAGGER_CSS, REDOC_JS)):
        return folder
    return None


def install_docs(app: FastAPI, *, docs_url: str = "/docs", redoc_url: str = "/redoc") -> None:
    """Add the two docs pages (create the app with ``docs_url=None, redoc_url=None``)."""
    folder = assets_dir()
    if folder is None:
        logger.warning(
            "the docs assets (PyPI package fastapi-offline) are not installed: %s and %s show only a "
            "link to the OpenAPI document",
            docs_url,
            redoc_url,
        )
    else:
        app.mount(ASSETS_URL, StaticFiles(directory=folder), name="docs-assets")

    def root(request: Request) -> str:
        return request.scope.get("root_path", "").rstrip("/")

    @app.get(docs_url, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        base = root(request)
        if folder is None:
            return _missing(app, base)
        return get_swagger_ui_html(
            openapi_url=f"{base}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{base}{ASSETS_URL}/{SWAGGER_JS}",
            swagger_css_url=f"{base}{ASSETS_URL}/{SWAGGER_CSS}",
            swagger_favicon_url=f"{base}{ASSETS_URL}/{FAVICON}",
            swagger_ui_parameters=SWAGGER_PARAMETERS,
        )

    @app.get(redoc_url, include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        base = root(request)
        if folder is None:
            return _missing(app, base)
        return get_redoc_html(
            openapi_url=f"{base}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{base}{ASSETS_URL}/{REDOC_JS}",
            redoc_favicon_url=f"{base}{ASSETS_URL}/{FAVICON}",
            with_google_fonts=False,
        )


def _missing(app: FastAPI, base: str) -> HTMLResponse:
    url = html.escape(f"{base}{app.openapi_url}")
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(app.title)}</title></head>"
        f"<body><h1>{html.escape(app.title)}</h1><p>The interactive docs need the package "
        f"<code>fastapi-offline</code> (<code>pip install fastapi-offline</code>). The OpenAPI document "
        f"is at <a href='{url}'>{url}</a>.</p></body></html>"
    )
