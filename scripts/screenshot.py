#!/usr/bin/env python
"""Regenerate the README's screenshot of the search page.

Starts the service on a free loopback port over an index (like `qaslr serve`), opens the page in
headless Chromium (Debian's `chromium` and `chromium-driver`, through selenium), types a query, waits
until the stream has settled, the thumbnails have loaded and the players sit at their moments, and
saves a PNG of at most --max-kb kilobytes (palette-reduced, then scaled down, if it must).

    # the demo's index (qaslr demo --no-serve --workdir data/demo), one-shot, shapes-world backbone:
    .venv/bin/python scripts/screenshot.py --index data/demo/index-oneshot/tiny-world \\
        --model data/demo/tiny-world --query "a red square appears"

    # no index at hand: --sample DIR builds a small shapes-world sample with a generated RANDOM
    # checkpoint (the page says its rankings are meaningless) and uses its first query
    .venv/bin/python scripts/screenshot.py --sample /tmp/qaslr-sample

Settings not given as flags come from the environment as for `qaslr serve` (QASLR_INDEX, ...).
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index", help="index directory (QASLR_INDEX)")
    p.add_argument("--model", help="backbone directory or hub id (QASLR_MODEL)")
    p.add_argument("--head", help="streaming head directory, for a QASLR index (QASLR_HEAD)")
    p.add_argument("--sample", help="build (once) and use a small sample index in this directory")
    p.add_argument("--query", help="the query typed into the page (default with --sample: its first)")
    p.add_argument("--top-k", type=int, default=4, help="results shown (default 4)")
    p.add_argument("--out", default=str(ROOT / "docs" / "search-page.png"), help="PNG to write")
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=1000)
    p.add_argument("--max-kb", type=int, default=300, help="largest PNG allowed (default 300 KB)")
    return p.parse_args(argv)


def build_sample(directory: Path) -> tuple[Path, Path, str]:
    """(index, checkpoint, a query) of a small sample: 4 shapes-world videos of 20-30 s in formats
    a browser plays, one-shot index, generated random-weight checkpoint. Built once."""
    from indexer import BuildOptions, build_index
    from models.checkpoint import make_checkpoint
    from world.corpus import CorpusConfig, make_corpus

    directory.mkdir(parents=True, exist_ok=True)
    checkpoint = directory / "checkpoint"
    if not (checkpoint / "config.json").exists():
        make_checkpoint(checkpoint, seed=0)
    config = CorpusConfig(
        videos=4,
        min_duration_s=20.0,
        max_duration_s=30.0,
        fps=(6.0,),
        short_side=(96, 128),
        formats=(("h264", ".mp4"), ("vp9", ".webm")),
        prefix="sample-",
    )
    corpus = make_corpus(directory / "videos", config)
    index = directory / "index"
    if not (index / "manifest.json").exists():
        options = BuildOptions(model=str(checkpoint), embedder="oneshot", workers=1)
        build_index(corpus.manifest, index, options)  # raises (a precise error) when it cannot build
    return index, checkpoint, corpus.queries()[0][0]


def start_server(settings):
    """(base URL, stop function) of the app under uvicorn on a free loopback port."""
    import socket

    import httpx
    import uvicorn

    from service.app import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while True:
        try:
            r = httpx.get(f"{base}/readyz", timeout=2)
            if r.status_code == 200:
                break
            if r.json().get("status") == "failed":
                raise SystemExit(f"the service failed to start: {r.json().get('error')}")
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or not thread.is_alive():
            raise SystemExit("the service did not become ready")
        time.sleep(0.2)

    def stop():
        server.should_exit = True
        thread.join(timeout=15)

    return base, stop


def browser(width: int, height: int, profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        raise SystemExit("needs chromium and chromedriver (apt-get install chromium chromium-driver)")
    options = Options()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--mute-audio",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


def capture(base: str, args) -> bytes:
    import tempfile

    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    with tempfile.TemporaryDirectory() as profile:
        driver = browser(args.width, args.height, Path(profile))
        try:
            driver.get(base + "/")
            driver.execute_script(f"document.getElementById('top_k').value = {int(args.top_k)};")
            driver.find_element(By.ID, "q").send_keys(args.query, Keys.ENTER)
            wait = WebDriverWait(driver, 300, poll_frequency=0.2)
            wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-search-done") == "1")
            wait.until(
                lambda d: d.execute_script(
                    "return [...document.querySelectorAll('#results .thumb img')].every(i => i.complete)"
                    " && [...document.querySelectorAll('#results video')]"
                    ".every(v => v.error || (v.readyState >= 2 && !v.seeking && v.currentTime > 0));"
                )
            )
            time.sleep(1.0)  # let the players paint the frame they seeked to
            driver.execute_script("document.activeElement && document.activeElement.blur();")
            return driver.get_screenshot_as_png()
        finally:
            driver.quit()


def shrink(png: bytes, max_bytes: int) -> bytes:
    """The PNG, optimised; palette-reduced and then scaled down until it fits ``max_bytes``."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    for scale in (1.0, 0.85, 0.7, 0.6, 0.5):
        frame = (
            image
            if scale == 1.0
            else image.resize((int(image.width * scale), int(image.height * scale)), Image.Resampling.LANCZOS)
        )
        for colours in (None, 256, 128, 64):
            candidate = frame if colours is None else frame.quantize(colours, method=Image.Quantize.MEDIANCUT)
            out = io.BytesIO()
            candidate.save(out, format="PNG", optimize=True)
            if out.tell() <= max_bytes:
                return out.getvalue()
    raise SystemExit(f"could not get the screenshot under {max_bytes} bytes")


def main(argv=None) -> int:
    args = parse_args(argv)
    from service.settings import Settings

    if args.sample:
        index, checkpoint, query = build_sample(Path(args.sample))
        args.index, args.model, args.query = str(index), str(checkpoint), args.query or query
    if not args.query:
        raise SystemExit("--query is required (or --sample)")
    overrides = {k: v for k, v in (("index", args.index), ("model", args.model), ("head", args.head)) if v}
    settings = Settings(redis_url=None, **overrides)
    base, stop = start_server(settings)
    try:
        png = capture(base, args)
    finally:
        stop()
    data = shrink(png, args.max_kb * 1000)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    print(f"wrote {out} ({len(data) // 1000} KB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
