"""The shapes-world backbone (tiny-world) is served honestly: /readyz says so (``shapes_world`` and a
warning), the page shows a banner, and every search answer's ``warnings`` says that rankings of
video outside the shapes world mean nothing. A random test checkpoint is not the shapes world."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.service.conftest import _build, live_server


def _engine(model) -> SimpleNamespace:
    return SimpleNamespace(config=SimpleNamespace(model=model), random_weights=False)


def test_the_marker_is_the_checkpoints_own_preset(tiny_world_checkpoint, tiny_checkpoint, tmp_path):
    import shutil

    from service.honesty import SHAPES_WORLD_PRESET, answer_warnings, is_shapes_world
    from training.backbone import PRESET

    assert SHAPES_WORLD_PRESET == PRESET
    assert is_shapes_world(_engine(str(tiny_world_checkpoint)))
    renamed = shutil.copytree(tiny_world_checkpoint, tmp_path / "my-model")  # the name is not the marker
    assert is_shapes_world(_engine(renamed))
    assert not is_shapes_world(_engine(str(tiny_checkpoint)))
    assert not is_shapes_world(_engine("Qwen/Qwen3-VL-Embedding-2B"))  # a hub id
    assert answer_warnings(_engine(renamed)) and not answer_warnings(_engine(tiny_checkpoint))
    assert json.loads((renamed / "qaslr_backbone.json").read_text())["preset"] == PRESET


@pytest.fixture(scope="module")
def world_index(tmp_path_factory, video_factory, tiny_world_checkpoint) -> Path:
    root = tmp_path_factory.mktemp("world_corpus")
    lines = []
    for i in range(2):
        path = video_factory(root / f"s{i}.mp4", num_frames=24, fps=8, size=(64, 64), seed=60 + i)
        lines.append(json.dumps({"id": f"s{i}", "path": str(path), "metadata": {"kind": "single"}}))
    manifest = root / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    options = {"frames": 4, "bank_per_second": 1, "workers": 1, "frame_store": "none"}
    return _build(
        manifest, tmp_path_factory.mktemp("idx") / "world", tiny_world_checkpoint, None, options=options
    )


@pytest.mark.timeout(300)
def test_readyz_the_page_and_every_answer_say_shapes_world(world_index, tiny_world_checkpoint):
    from service.app import create_app
    from service.honesty import SHAPES_WORLD_WARNING
    from service.settings import Settings

    settings = Settings(
        index=world_index, model=str(tiny_world_checkpoint), default_frames=4, max_frames=4, redis_url=None
    )
    with live_server(create_app(settings)) as client:
        ready = client.get("/readyz").json()
        assert ready["shapes_world"] is True and ready["random_weights"] is False
        assert "shapes-world" in ready["warning"] and "mean nothing" in ready["warning"]
        for mode in ("indexed", "rerank"):
            r = client.post("/search", json={"query": "a red square appears", "mode": mode, "top_k": 2})
            assert r.status_code == 200, r.text
            assert SHAPES_WORLD_WARNING in r.json()["warnings"]
        lines = client.post("/search/stream", json={"query": "a red square appears", "top_k": 2}).text
        final = json.loads(lines.strip().splitlines()[-1])
        assert final["type"] == "final" and SHAPES_WORLD_WARNING in final["response"]["warnings"]
        # the checkpoint's time head serves by default: a query about order goes to it, over HTTP too
        assert ready["time_head_source"] == "checkpoint" and len(ready["time_head"]) == 16
        r = client.post(
            "/search", json={"query": "a red square appears, then a blue circle appears", "top_k": 2}
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["route"].startswith("a query about order or count")  # the time head read it
        if "the frame tier's order stands" in body["route"]:  # two noise videos: its first may show neither
            assert body["rerank_embedder"] is None and {hit["tier"] for hit in body["results"]} == {"frame"}
        else:
            assert body["rerank_embedder"] == "time" and {hit["tier"] for hit in body["results"]} == {"time"}
        for hit in body["results"]:  # whether its events show at all, beside whether as asked
            if hit["tier"] == "time":
                assert 0.0 <= hit["relevance"] <= hit["events_relevance"] + 1e-9 <= 1.0 + 1e-9, hit
            else:
                assert hit["events_relevance"] is None, hit
        assert "time_head_source" in client.get("/static/app.js").text  # the page's status line names it
        page = client.get("/").text
        assert 'id="shapes-world"' in page and "mean nothing" in page
        assert '$("shapes-world").hidden = !body.shapes_world' in client.get("/static/app.js").text


def test_a_random_checkpoint_is_not_shapes_world(server):
    ready = server.get("/readyz").json()
    assert ready["shapes_world"] is False and "shapes-world" not in ready.get("warning", "")
    r = server.post("/search", json={"query": "a red block", "mode": "indexed", "top_k": 1})
    assert r.status_code == 200 and not any("shapes-world" in w for w in r.json()["warnings"])


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_the_page_shows_the_shapes_world_banner_in_a_real_browser(
    world_index, tiny_world_checkpoint, tmp_path
):
    from tests.service.test_page import _browser

    chromium, chromedriver = _browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from service.app import create_app
    from service.settings import Settings

    settings = Settings(
        index=world_index, model=str(tiny_world_checkpoint), default_frames=4, max_frames=4, redis_url=None
    )
    options = Options()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1280,700")
    options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    try:
        with live_server(create_app(settings)) as client:
            driver.get(str(client.base_url) + "/")
            banner = driver.find_element(By.ID, "shapes-world")
            WebDriverWait(driver, 30, poll_frequency=0.1).until(lambda d: banner.is_displayed())
            assert "shapes-world" in banner.text and "mean nothing" in banner.text
            shot = tmp_path / "shapes-world-banner.png"
            assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 0
    finally:
        driver.quit()
