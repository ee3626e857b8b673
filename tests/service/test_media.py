"""The media routes through real HTTP: thumbnails, the video files with range requests, media tokens."""

from __future__ import annotations

import http.client
import io
import json
from pathlib import Path

import pytest

from tests.service.conftest import live_server


def _source_of(server, video_id: str) -> bytes:
    """The bytes the media route sends: the source, or its preview where browsers cannot play it
    (the corpus's videos are MPEG-4 Part 2 in MP4, so theirs)."""
    from service.media import playable_file

    engine = server.app.state.qaslr.engine
    return Path(playable_file(engine.index.directory, engine.index.video(video_id)).path).read_bytes()


def _raw_get(server, path: str) -> tuple[int, dict]:
    """GET ``path`` exactly as written (httpx would normalise ``..`` and encodings)."""
    host, port = str(server.base_url.host), server.base_url.port
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        return response.status, json.loads(body) if body.startswith(b"{") else {}
    finally:
        conn.close()


def test_a_frame_is_a_jpeg_thumbnail_bounded_by_size(server):
    from PIL import Image

    r = server.get("/videos/vid0/frames/5")
    assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg"
    image = Image.open(io.BytesIO(r.content))
    assert image.format == "JPEG" and min(image.size) > 0
    small = Image.open(io.BytesIO(server.get("/videos/vid0/frames/5", params={"size": 16}).content))
    assert max(small.size) <= 16
    assert server.get("/videos/vid0/frames/5").content == r.content  # the same pixels from the cache


def test_frames_outside_the_video_or_bad_sizes_are_refused(server):
    num_frames = server.get("/videos/vid0").json()["num_frames"]
    assert server.get(f"/videos/vid0/frames/{num_frames - 1}").status_code == 200
    r = server.get(f"/videos/vid0/frames/{num_frames}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    for bad in ("-1", "abc", "1.5", "99999999999999"):
        assert server.get(f"/videos/vid0/frames/{bad}").status_code == 422, bad
    for size in (0, 15, 513, "big"):
        r = server.get("/videos/vid0/frames/0", params={"size": size})
        assert r.status_code == 422 and r.json()["error"]["field"] == "size", size


def test_the_media_file_is_served_whole_and_by_ranges(server):
    data = _source_of(server, "vid1")
    whole = server.get("/videos/vid1/media")
    assert whole.status_code == 200 and whole.content == data
    assert whole.headers["accept-ranges"] == "bytes" and whole.headers["content-type"] == "video/mp4"
    size = len(data)
    cases = {
        "bytes=0-99": (0, 99),
        "bytes=100-": (100, size - 1),
        "bytes=-50": (size - 50, size - 1),
        f"bytes=10-{size + 1000}": (10, size - 1),
        f"bytes={size - 1}-{size - 1}": (size - 1, size - 1),
    }
    for header, (start, end) in cases.items():
        r = server.get("/videos/vid1/media", headers={"Range": header})
        assert r.status_code == 206, header
        assert r.content == data[start : end + 1], header
        assert r.headers["content-range"] == f"bytes {start}-{end}/{size}", header
        assert int(r.headers["content-length"]) == end - start + 1
    for header in (f"bytes={size}-", "bytes=50-10", "bytes=-0", "bytes=abc", "bytes=-"):
        r = server.get("/videos/vid1/media", headers={"Range": header})
        assert r.status_code == 416, header
        assert r.headers["content-range"] == f"bytes */{size}"
        assert r.json()["error"]["code"] == "range_not_satisfiable"
    # several ranges: the whole file (HTTP lets a server ignore them)
    assert server.get("/videos/vid1/media", headers={"Range": "bytes=0-1,5-6"}).content == data


@pytest.mark.parametrize(
    "path",
    [
        "/videos/nope/media",
        "/videos/nope/frames/0",
        "/videos/../videos/vid0/media",
        "/videos/..%2F..%2Fetc%2Fpasswd/media",
        "/videos/%2e%2e/%2e%2e/etc/passwd/media",
        "/videos/%2Fetc%2Fpasswd/media",
        "/videos/vid0%00/media",
        "/videos/vid0%2F..%2Fvid1/frames/0",
        "/videos/%00/frames/0",
    ],
)
def test_unknown_ids_and_path_tricks_are_not_found(server, path):
    status, body = _raw_get(server, path)
    assert status == 404, (path, status, body)
    assert "passwd" not in json.dumps(body) or body["error"]["code"] == "not_found"


def test_a_source_path_is_not_an_id(server):
    record = server.app.state.qaslr.engine.index.video("vid0")
    status, _ = _raw_get(server, "/videos/" + record.path.lstrip("/") + "/media")
    assert status == 404
    assert _raw_get(server, "/videos/vid0/frames/0%00")[0] == 422


def test_media_routes_need_a_key_or_a_media_token(make_settings):
    from service.app import create_app

    with live_server(create_app(make_settings(api_keys=["alpha-key"]))) as client:
        for path in ("/videos/vid0/media", "/videos/vid0/frames/0"):
            assert client.get(path).status_code == 401
            assert client.get(path, params={"key": "alpha-key"}).status_code == 401  # never a key in a URL
            assert client.get(path, headers={"X-API-Key": "alpha-key"}).status_code == 200
            assert client.get(path, params={"token": "1.abc"}).status_code == 401
        assert client.post("/media-token").status_code == 401
        issued = client.post("/media-token", headers={"Authorization": "Bearer alpha-key"})
        assert issued.status_code == 200 and issued.json()["expires_in_s"] > 0
        token = issued.json()["token"]
        assert client.get("/videos/vid0/frames/0", params={"token": token}).status_code == 200
        r = client.get("/videos/vid0/media", params={"token": token}, headers={"Range": "bytes=0-9"})
        assert r.status_code == 206 and len(r.content) == 10
        forged = token[:-1] + ("0" if token[-1] != "0" else "1")
        assert client.get("/videos/vid0/media", params={"token": forged}).status_code == 401
        # a token is for the media routes only
        assert client.post("/search", json={"query": "x"}, params={"token": token}).status_code == 401


def test_media_tokens_expire_and_follow_the_keys():
    from service.media import issue_media_token, media_token_valid

    token, expiry = issue_media_token(["a"], ttl_s=60, now=1000)
    assert media_token_valid(token, ["a"], now=1059)
    assert not media_token_valid(token, ["a"], now=1061)
    assert not media_token_valid(token, ["b"], now=1000)
    assert not media_token_valid("x" + token, ["a"], now=1000)


def test_the_media_routes_are_documented(server):
    paths = server.get("/openapi.json").json()["paths"]
    frames = paths["/videos/{video_id}/frames/{frame_index}"]["get"]
    assert {"200", "401", "404", "422"} <= set(frames["responses"])
    assert "image/jpeg" in frames["responses"]["200"]["content"]
    media = paths["/videos/{video_id}/media"]["get"]
    assert {"200", "206", "401", "404", "416"} <= set(media["responses"])
    assert "/media-token" in paths


def test_a_source_browsers_cannot_play_is_served_as_its_h264_preview(server):
    import av

    record = server.app.state.qaslr.engine.index.video("vid3")  # MPEG-4 Part 2 in MP4
    r = server.get("/videos/vid3/media")
    assert r.status_code == 200 and r.headers["content-type"] == "video/mp4"
    assert r.content != Path(record.path).read_bytes()
    with av.open(io.BytesIO(r.content)) as c:
        stream = c.streams.video[0]
        assert stream.codec_context.name == "h264" and stream.codec_context.pix_fmt == "yuv420p"
        assert float(stream.average_rate) == pytest.approx(record.fps)
        assert sum(1 for _ in c.decode(stream)) == record.num_frames
    assert r.content.index(b"moov") < r.content.index(b"mdat")
    etag, modified = r.headers["etag"], r.headers["last-modified"]
    assert etag.startswith('"') and modified.endswith("GMT")
    again = server.get("/videos/vid3/media", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
    part = server.get("/videos/vid3/media", headers={"Range": "bytes=0-99"})
    assert part.status_code == 206 and part.content == r.content[:100]
    assert part.headers["content-range"] == f"bytes 0-99/{len(r.content)}" and part.headers["etag"] == etag


def test_a_video_without_a_playable_copy_says_why_without_paths(make_settings, small_index, monkeypatch):
    from indexer import previews
    from service.app import create_app

    def broken(source, dest, **kw):
        raise previews.PreviewError("the source could not be decoded (InvalidDataError)")

    monkeypatch.setattr(previews, "transcode", broken)
    with live_server(create_app(make_settings(index=small_index))) as client:
        record = client.get("/videos/vid2").json()
        r = client.get("/videos/vid2/media")
        assert r.status_code == 422 and r.json()["error"]["code"] == "media_unplayable"
        message = r.json()["error"]["message"]
        assert "cannot play" in message and "could not be decoded" in message
        assert str(small_index) not in r.text and "/" not in message and "Traceback" not in r.text
        assert record["num_frames"] > 0  # its thumbnails and times are still there
        assert client.get("/videos/vid2/frames/0").status_code == 200
