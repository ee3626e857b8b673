"""The search page at ``GET /``: served without anything external, and driven in a real headless
Chromium (Debian's ``chromium`` through selenium and the system ``chromedriver``; nothing downloads
a browser). The browser test needs those two programs: without them it is skipped with the reason,
and where ``QASLR_REQUIRE_BROWSER=1`` (``scripts/test.sh``, hence CI) it fails instead."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.service.conftest import _build, live_server

QUERY = "a red block slides across the sea"


def test_the_page_and_its_assets_are_served_locally(server):
    r = server.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in r.headers["content-security-policy"]
    html = r.text
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert "/static/app.js" in assets and "/static/app.css" in assets
    for asset in assets:
        assert asset.startswith("/"), f"the page loads {asset} from elsewhere"
        assert server.get(asset).status_code == 200
    for asset in ("/static/app.js", "/static/app.css"):
        text = server.get(asset).text
        assert "http://" not in text and "https://" not in text, f"{asset} reaches outside the server"
    assert "/search/stream" in server.get("/static/app.js").text


# -- the browser ------------------------------------------------------------------------------------
def _browser() -> tuple[str, str]:
    """(chromium, chromedriver) paths, or skip (fail where the browser is required)."""
    chromium = next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
    )
    driver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None
    )
    try:
        import selenium  # noqa: F401

        missing = []
    except ImportError:
        missing = ["the selenium package (pip install -e '.[dev]')"]
    if chromium is None:
        missing.append("chromium (apt-get install chromium)")
    if driver is None:
        missing.append("chromedriver (apt-get install chromium-driver)")
    if missing:
        reason = "the search-page browser test needs " + " and ".join(missing)
        if os.environ.get("QASLR_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return chromium, driver


@pytest.fixture(scope="module")
def web_index(tmp_path_factory, video_factory, tiny_checkpoint, tiny_head) -> Path:
    """Three short VP9/WebM videos (a format every Chromium plays) with titles, indexed."""
    root = tmp_path_factory.mktemp("web_corpus")
    lines = []
    for i, (frames, title) in enumerate(
        [(60, "Harbour at dawn"), (48, "Market street"), (72, "Forest path")]
    ):
        path = video_factory(
            root / f"w{i}.webm", num_frames=frames, fps=12, size=(96, 64), seed=40 + i, codec="vp9"
        )
        lines.append(json.dumps({"id": f"web/w{i}", "path": str(path), "metadata": {"title": title, "n": i}}))
    manifest = root / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return _build(manifest, tmp_path_factory.mktemp("idx") / "web", tiny_checkpoint, tiny_head)


@pytest.fixture(scope="module")
def web_settings(web_index, tiny_checkpoint, tiny_head):
    from service.settings import Settings

    def make(**overrides):
        values = dict(
            index=web_index, model=str(tiny_checkpoint), head=tiny_head, default_frames=8, max_frames=16
        )
        return Settings(redis_url=None, **{**values, **overrides})

    return make


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    """One headless Chromium for the module's tests."""
    chromium, chromedriver = _browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = chromium
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, for the tests to read
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--mute-audio",
        "--window-size=1280,1000",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(arg)
    browser = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    browser.set_page_load_timeout(30)
    yield browser
    browser.quit()


def _wait(driver, timeout=40):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1)


def _search_done(driver) -> bool:
    return driver.find_element("tag name", "body").get_attribute("data-search-done") == "1"


def _forget_last_search(driver) -> None:
    """Clear the previous search's done flag before starting another, so that waiting for the flag
    waits for the new search (the page clears it itself, but only once the new search has started)."""
    driver.execute_script("delete document.body.dataset.searchDone;")


@pytest.mark.timeout(180)
def test_a_search_in_a_real_browser_shows_cards_thumbnails_and_the_moment(driver, web_settings, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from service.app import create_app

    with live_server(create_app(web_settings())) as client:
        driver.get(str(client.base_url) + "/")
        wait = _wait(driver)

        # an empty query is refused by the page itself, visibly
        driver.find_element(By.ID, "go").click()
        error = driver.find_element(By.ID, "error")
        wait.until(lambda d: error.is_displayed())
        assert "query" in error.text.lower()

        # 1. type a query
        driver.find_element(By.ID, "q").send_keys(QUERY, Keys.ENTER)
        # 2. wait for the result cards (the final answer of the stream)
        wait.until(_search_done)
        assert not error.is_displayed()
        cards = driver.find_elements(By.CSS_SELECTOR, "#results .card")
        assert len(cards) == 3
        titles = {c.find_element(By.CSS_SELECTOR, ".title").text for c in cards}
        assert titles == {"Harbour at dawn", "Market street", "Forest path"}
        assert all(re.match(r"#\d → #\d", c.find_element(By.CSS_SELECTOR, ".move").text) for c in cards)
        assert driver.find_element(By.ID, "timings").is_displayed()
        assert driver.find_elements(By.CSS_SELECTOR, "#results .card .strip .bar")

        # 3. the thumbnails actually loaded
        wait.until(
            lambda d: d.execute_script(
                "const imgs = [...document.querySelectorAll('#results .thumb img')];"
                "return imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0);"
            )
        )
        # 4. every player sits inside its moment once it has loaded
        moments = driver.execute_script(
            "return [...document.querySelectorAll('#results .card')].map(c => [c._moment.start_s, c._moment.end_s]);"
        )
        wait.until(
            lambda d: d.execute_script(
                "return [...document.querySelectorAll('#results .card video')].every(v => v.readyState >= 1);"
            )
        )
        times = driver.execute_script(
            "return [...document.querySelectorAll('#results .card video')].map(v => v.currentTime);"
        )
        for (start, end), t in zip(moments, times, strict=True):
            assert start - 1e-3 <= t <= end, (start, end, t)  # media time is kept to the microsecond
        # a thumbnail seeks the player to its frame (keyboard: thumbnails are buttons)
        cards[0].find_elements(By.CSS_SELECTOR, ".thumb")[-1].send_keys(Keys.ENTER)
        wait.until(
            lambda d: d.execute_script(
                "const c = document.querySelector('#results .card');"
                "const ts = [...c.querySelectorAll('.thumb span')];"
                "return Math.abs(c.querySelector('video').currentTime - parseFloat(ts[ts.length - 1].textContent)) < 0.06;"
            )
        )
        # a weak time-head result (an order or a count) reads "not as asked", not "no good match": its
        # relevance says whether its events show in the order or number asked
        # relevance says whether its events show in the order or number asked; where an event does not
        # show at all (events_relevance below the threshold) it says that instead
        labels = driver.execute_script(
            "return [{tier: 'time', relevance: 0.21}, {tier: 'time', relevance: 0.92},"
            " {tier: 'frame', relevance: 0.21}, {tier: 'time'},"
            " {tier: 'time', relevance: 0.21, events_relevance: 0.95},"
            " {tier: 'time', relevance: 0.0, events_relevance: 0.3}].map(relevanceLabel);"
        )
        assert [x["text"] for x in labels] == [
            "not as asked (relevance 0.21)",
            "relevance 0.92",
            "no good match (relevance 0.21)",
            "",
            "not as asked (relevance 0.21)",
            "an event does not show (relevance 0.00)",
        ]
        assert [x["weak"] for x in labels] == [True, False, True, False, True, True]
        assert "in the order or number asked" in labels[0]["title"]
        assert "nothing like it is there" in labels[2]["title"]
        assert "every event shows, but not in the order or number asked" in labels[4]["title"]
        assert "does not show (the weakest reads 0.30)" in labels[5]["title"]
        # 5. a screenshot
        shot = tmp_path / "search-page.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 0


@pytest.mark.timeout(180)
def test_the_page_asks_for_a_key_searches_by_image_and_shows_errors(driver, web_settings, tmp_path):
    from PIL import Image
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from service.app import create_app

    picture = tmp_path / "query.png"
    Image.new("RGB", (40, 30), (200, 30, 30)).save(picture)
    not_a_picture = tmp_path / "notes.png"
    not_a_picture.write_text("this is not a picture")

    with live_server(create_app(web_settings(api_keys=["page-key"]))) as client:
        driver.get(str(client.base_url) + "/")
        driver.execute_script("sessionStorage.clear();")
        driver.refresh()
        wait = _wait(driver)
        error = driver.find_element(By.ID, "error")
        driver.find_element(By.ID, "q").send_keys(QUERY, Keys.ENTER)
        wait.until(lambda d: error.is_displayed())
        assert "API key" in error.text and driver.find_element(By.ID, "keybox").get_attribute("open")

        driver.find_element(By.ID, "key").send_keys("page-key")
        driver.find_element(By.ID, "key-save").click()
        assert driver.execute_script("return sessionStorage.getItem('qaslr.apiKey');") == "page-key"

        # an image query, alone: cards whose thumbnails load through the media token
        driver.find_element(By.ID, "q").clear()
        driver.find_element(By.ID, "image").send_keys(str(picture))
        wait.until(lambda d: d.find_element(By.ID, "image-info").is_displayed())
        _forget_last_search(driver)
        driver.find_element(By.ID, "go").click()
        wait.until(_search_done)
        assert not error.is_displayed()
        assert len(driver.find_elements(By.CSS_SELECTOR, "#results .card")) == 3
        wait.until(
            lambda d: d.execute_script(
                "const imgs = [...document.querySelectorAll('#results .thumb img')];"
                "return imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0) && "
                "imgs.every(i => i.src.includes('token=') && !i.src.includes('page-key'));"
            )
        )

        # the server's refusal is shown as it is
        driver.find_element(By.ID, "image").send_keys(str(not_a_picture))
        driver.find_element(By.ID, "go").click()
        wait.until(lambda d: error.is_displayed())
        assert "415" in error.text and "picture" in error.text


# -- every result plays: world videos in the three codecs of the world -----------------------------
WORLD_FORMATS = (("h264", ".mp4"), ("mpeg4", ".avi"), ("vp9", ".webm"))


@pytest.fixture(scope="module")
def world_web_settings(tmp_path_factory, tiny_checkpoint, tiny_head):
    """Three world videos, H.264/MP4, MPEG-4 Part 2/AVI (which browsers do not play: served as its
    preview) and VP9/WebM, of different aspect ratios, indexed as the service tests index."""
    from service.settings import Settings
    from world.corpus import CorpusConfig, make_corpus

    config = CorpusConfig(
        videos=3, seed=11, min_duration_s=18.0, max_duration_s=24.0, fps=(6.0, 8.0), formats=WORLD_FORMATS
    )
    corpus = make_corpus(tmp_path_factory.mktemp("world_web") / "corpus", config)
    index = _build(corpus.manifest, tmp_path_factory.mktemp("idx") / "world_web", tiny_checkpoint, tiny_head)

    def make(**overrides):
        values = dict(
            index=index, model=str(tiny_checkpoint), head=tiny_head, default_frames=8, max_frames=16
        )
        return Settings(redis_url=None, **{**values, **overrides})

    make.corpus = corpus
    return make


def _console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


@pytest.mark.timeout(240)
def test_every_result_plays_from_its_moment_whatever_the_source_codec(driver, world_web_settings):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from service.app import create_app

    codecs = {v.codec for v in world_web_settings.corpus.videos}
    assert codecs == {"h264", "mpeg4", "vp9"}
    with live_server(create_app(world_web_settings())) as client:
        driver.get(str(client.base_url) + "/")
        _console_errors(driver)  # start from a clean console
        wait = _wait(driver, timeout=90)
        driver.find_element(By.ID, "q").send_keys(QUERY, Keys.ENTER)
        wait.until(_search_done)
        cards = driver.find_elements(By.CSS_SELECTOR, "#results .card")
        assert len(cards) == 3
        # every card's player has data at its moment's start (the MPEG-4 one through its preview)
        wait.until(
            lambda d: d.execute_script(
                "return [...document.querySelectorAll('#results .card')].every(c => c._moment && "
                "c.querySelector('video').readyState >= 2 && !c.querySelector('video').seeking && "
                "Math.abs(c.querySelector('video').currentTime - c._moment.start_s) < 0.5);"
            )
        )
        state = driver.execute_script(
            "return [...document.querySelectorAll('#results .card')].map(c => ({"
            "err: c.querySelector('video').error && c.querySelector('video').error.code, "
            "shown: !c.querySelector('.player-error').hidden, "
            "mark: c.querySelectorAll('.strip .moment-mark').length, "
            "tier: c.querySelector('.tier').textContent, "
            "bars: [...c.querySelectorAll('.strip .bar')].map(b => parseFloat(b.style.height))}));"
        )
        for card in state:
            assert card["err"] is None and not card["shown"], card
            assert card["mark"] == 1 and card["tier"] in (
                "frame tier",
                "one-shot tier",
                "head tier",
                "stage 1",
            )
        # one scale for all strips (bars are 12-100 % high): the answer's lowest and highest values are
        # the ends, so not every card spans the whole range as it would with a scale of its own
        spans = [
            min(c["bars"]) == pytest.approx(12.0) and max(c["bars"]) == pytest.approx(100.0) for c in state
        ]
        assert not all(spans), state
        # thumbnails keep the source's aspect ratio
        ratios = driver.execute_script(
            "return [...document.querySelectorAll('#results .card')].map(c => "
            "[...c.querySelectorAll('.thumb img')].filter(i => i.complete && i.naturalWidth)"
            ".map(i => i.naturalWidth / i.naturalHeight));"
        )
        titles = [c.find_element(By.CSS_SELECTOR, ".title").get_attribute("title") for c in cards]
        truth = world_web_settings.corpus.by_id()
        for vid, seen in zip(titles, ratios, strict=True):
            want = truth[vid].width / truth[vid].height
            assert seen and all(abs(r - want) / want < 0.05 for r in seen), (vid, want, seen)
        assert _console_errors(driver) == []


def test_the_readme_screenshot_is_a_small_png():
    root = Path(__file__).resolve().parents[2]
    shot = root / "docs" / "search-page.png"
    assert "docs/search-page.png" in (root / "README.md").read_text()
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) <= 300 * 1000


def test_the_screenshot_script_keeps_pngs_under_the_limit():
    import importlib.util
    import io

    import numpy as np
    from PIL import Image

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("screenshot", root / "scripts" / "screenshot.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    noise = np.random.default_rng(0).integers(0, 256, size=(400, 600, 3), dtype=np.uint8)
    raw = io.BytesIO()
    Image.fromarray(noise).save(raw, format="PNG")
    assert raw.tell() > 300_000
    small = script.shrink(raw.getvalue(), 300_000)
    assert len(small) <= 300_000 and Image.open(io.BytesIO(small)).format == "PNG"


# -- what is said ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def talking_web_settings(tmp_path_factory, video_factory, tiny_checkpoint):
    """Two VP9/WebM videos, one with a SubRip sidecar, indexed one-shot."""
    from service.settings import Settings

    root = tmp_path_factory.mktemp("talking_web")
    lines = []
    for i, title in enumerate(("Quay", "Field")):
        path = video_factory(
            root / f"t{i}.webm", num_frames=48, fps=12, size=(96, 64), seed=70 + i, codec="vp9"
        )
        lines.append(json.dumps({"id": f"t{i}", "path": str(path), "metadata": {"title": title}}))
    (root / "t0.srt").write_text("1\n00:00:01,500 --> 00:00:03,000\nthe <i>harbour</i> bell rings twice\n")
    manifest = root / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    index = _build(manifest, tmp_path_factory.mktemp("idx") / "talking", tiny_checkpoint, None)
    return lambda: Settings(
        index=index, model=str(tiny_checkpoint), default_frames=8, max_frames=16, redis_url=None
    )


@pytest.mark.timeout(180)
def test_the_page_searches_what_is_said_and_shows_the_snippet_and_its_time(driver, talking_web_settings):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    from service.app import create_app

    with live_server(create_app(talking_web_settings())) as client:
        driver.get(str(client.base_url) + "/")
        _console_errors(driver)  # start from a clean console (the module's browser is shared)
        wait = _wait(driver)
        sources = Select(driver.find_element(By.ID, "sources"))
        assert [o.get_attribute("value") for o in sources.options] == ["both", "seen", "said"]
        sources.select_by_value("said")
        driver.find_element(By.ID, "q").send_keys("harbour bells", Keys.ENTER)
        wait.until(_search_done)
        cards = driver.find_elements(By.CSS_SELECTOR, "#results .card")
        assert len(cards) == 1
        card = cards[0]
        assert card.find_element(By.CSS_SELECTOR, ".source").text == "said"
        spoken = card.find_element(By.CSS_SELECTOR, ".spoken")
        assert spoken.is_displayed()
        assert spoken.find_element(By.CSS_SELECTOR, "q").text.strip('"“”') == "the harbour bell rings twice"
        # the matched words are marked (adjacent ones as one phrase, as FTS5's highlight gives them)
        assert " ".join(m.text for m in spoken.find_elements(By.CSS_SELECTOR, "mark")) == "harbour bell"
        # the cue's times (1.5-3.0 s; the page writes times under a minute in seconds), and the cue is the moment
        assert "1.5 s" in spoken.find_element(By.CSS_SELECTOR, ".said-time").text
        assert "1.5 s" in card.find_element(By.CSS_SELECTOR, ".moment .play").text
        # both: the talking video first, the other one seen only
        sources.select_by_value("both")
        _forget_last_search(driver)
        driver.find_element(By.ID, "go").click()
        wait.until(_search_done)
        labels = [
            c.find_element(By.CSS_SELECTOR, ".source").text
            for c in driver.find_elements(By.CSS_SELECTOR, "#results .card")
        ]
        assert labels[0] == "seen + said" and labels[1:] == ["seen"]
        assert _console_errors(driver) == []


def test_the_page_numbers_cards_from_the_answers_page_start(server):
    # issue 40: "Next page" numbered its cards from 1 again; the stream says where a page starts
    js = server.get("/static/app.js").text
    assert "fillCard(card, result, (start || 1) + i" in js and "response.page_start" in js
    first = server.post("/search/stream", json={"query": QUERY, "top_k": 2, "mode": "indexed"})
    lines = [json.loads(x) for x in first.text.splitlines() if x]
    token = lines[-1]["response"]["next_page_token"]
    second = server.post(
        "/search/stream", json={"query": QUERY, "top_k": 2, "mode": "indexed", "page_token": token}
    )
    lines = [json.loads(x) for x in second.text.splitlines() if x]
    assert lines[0]["page_start"] == 3 and lines[-1]["response"]["page_start"] == 3
