"""The OpenAPI docs at ``/docs`` (Swagger UI) and ``/redoc`` work offline: every asset they load is
served by this server, with the right content type, and Swagger UI actually renders the document in
a headless Chromium (skipped without the browser, like tests/service/test_page.py)."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import live_server
from tests.service.test_page import _browser

TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}


@pytest.fixture(scope="module")
def app():
    from service.app import create_app
    from service.settings import Settings

    return create_app(Settings(index=None, redis_url=None))


def _assets(html: str) -> list[str]:
    return re.findall(r'(?:src|href|spec-url)="([^"]+)"', html) + re.findall(r"url: '([^']+)'", html)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_load_only_same_origin_assets(app, page):
    client = TestClient(app)
    r = client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "http://" not in r.text and "https://" not in r.text, "the docs page reaches outside the server"
    assets = _assets(r.text)
    assert "/openapi.json" in assets
    assert any(a.endswith(".js") for a in assets)
    for asset in assets:
        assert asset.startswith("/") and not asset.startswith("//"), asset
        got = client.get(asset)
        assert got.status_code == 200, asset
        suffix = asset[asset.rfind(".") :]
        if suffix in TYPES:
            assert got.headers["content-type"].startswith(TYPES[suffix]), (asset, got.headers["content-type"])
            assert len(got.content) > 1000 or suffix == ".png"


def test_the_docs_assets_are_not_in_the_api_document(app):
    paths = TestClient(app).get("/openapi.json").json()["paths"]
    assert not any(p.startswith(("/docs", "/redoc")) for p in paths)


@pytest.mark.browser
@pytest.mark.timeout(120)
def test_swagger_ui_renders_the_document_in_a_real_browser(app, tmp_path):
    chromium, chromedriver = _browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = Options()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1280,1000")
    options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    try:
        with live_server(app, wait_ready=False) as client:
            driver.set_page_load_timeout(30)
            driver.get(str(client.base_url) + "/docs")
            wait = WebDriverWait(driver, 40, poll_frequency=0.1)
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".swagger-ui .info .title"))
            title = driver.find_element(By.CSS_SELECTOR, ".swagger-ui .info .title").text
            assert "QASLR long-video search" in title
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock-summary-path"))
            paths = {
                e.text.replace("\u200b", "")
                for e in driver.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")
            }
            assert {"/search", "/search/stream", "/readyz"} <= paths, paths
            shot = tmp_path / "docs.png"
            assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 0
    finally:
        driver.quit()


def test_without_the_assets_package_the_docs_say_so_instead_of_a_blank_page(monkeypatch):
    import service.docs
    from service.app import create_app
    from service.settings import Settings

    monkeypatch.setattr(service.docs, "assets_dir", lambda: None)
    client = TestClient(create_app(Settings(index=None, redis_url=None)))
    for page in ("/docs", "/redoc"):
        r = client.get(page)
        assert r.status_code == 200 and "fastapi-offline" in r.text and "href='/openapi.json'" in r.text
        assert "http://" not in r.text and "https://" not in r.text
    assert client.get("/docs-assets/swagger-ui-bundle.js").status_code == 404
