"""docker-compose.yml: its structure, and its commands run natively (Docker cannot run here).

The smoke test takes the compose file's own commands and environment for `indexer` and `api`,
maps the container paths onto temporary directories, runs them as processes (the real Redis of
this machine, `indexer build` on generated videos, the API under uvicorn) and searches over HTTP.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from tests.helpers import ServerProcess, free_port

ROOT = Path(__file__).resolve().parents[2]


class _ComposeLoader(yaml.SafeLoader):
    """Accepts compose's `!reset` / `!override` merge tags."""


for _tag in ("!reset", "!override"):
    _ComposeLoader.add_constructor(
        _tag,
        lambda loader, node: (
            loader.construct_mapping(node)
            if isinstance(node, yaml.MappingNode)
            else loader.construct_sequence(node)
            if isinstance(node, yaml.SequenceNode)
            else loader.construct_scalar(node)
        ),
    )


def _load(name: str) -> dict:
    return yaml.load((ROOT / name).read_text(), Loader=_ComposeLoader)


@pytest.fixture(scope="module")
def compose() -> dict:
    return _load("docker-compose.yml")


def _env_names(service: dict) -> set[str]:
    env = service.get("environment", {})
    return set(env) if isinstance(env, dict) else {e.split("=", 1)[0] for e in env}


def _known_env_vars() -> set[str]:
    from service.settings import Settings

    # every field reads QASLR_<FIELD>, except redis_url, which reads the conventional REDIS_URL
    names = {f"QASLR_{name.upper()}" for name in Settings.model_fields if name != "redis_url"}
    return names | {"REDIS_URL"}


def test_services_and_builds_exist(compose):
    services = compose["services"]
    assert {"redis", "api", "indexer", "trainer"} <= set(services)
    for name, service in services.items():
        build = service.get("build")
        if build:
            assert (ROOT / build.get("context", ".") / build["dockerfile"]).is_file(), name
        else:
            assert "image" in service, f"{name} has neither build nor image"
    for extra in ("deploy/Dockerfile.cpu", "deploy/Dockerfile.gpu", "deploy/redis.conf", ".dockerignore"):
        assert (ROOT / extra).is_file(), extra


def test_api_replicas_sit_behind_one_proxy(compose):
    """`docker compose up --scale api=N`: no replica binds a host port (N would collide); the proxy
    publishes the one address and re-resolves `api` through Docker's DNS to reach every replica."""
    services = compose["services"]
    api, proxy = services["api"], services["proxy"]
    assert "ports" not in api and "8000" in [str(p) for p in api["expose"]]
    assert [p.split(":")[-1] for p in proxy["ports"]] == ["8080"]
    assert "${QASLR_PORT:-8000}" in proxy["ports"][0]
    assert proxy["depends_on"]["api"]["condition"] == "service_healthy"
    (mount,) = proxy["volumes"]
    assert mount.startswith("./deploy/nginx.conf:") and mount.endswith(":ro")
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    assert "resolver 127.0.0.11" in conf  # Docker's DNS: every replica, followed as they come and go
    assert "set $api http://api:8000;" in conf and "proxy_pass $api;" in conf  # a variable: re-resolved
    assert "listen 8080;" in conf and "proxy_buffering off;" in conf  # the NDJSON stream flows through
    assert "client_max_body_size 6m;" in conf  # image queries (the API's own limit is about 5.4 MiB)


def test_redis_is_bounded_lru_without_persistence(compose):
    redis = compose["services"]["redis"]
    assert any("redis.conf" in v and v.endswith(":ro") for v in redis["volumes"])
    assert "redis-cli" in " ".join(redis["healthcheck"]["test"])
    conf = (ROOT / "deploy/redis.conf").read_text()
    directives = {
        line.split()[0]: line.split()[1:]
        for line in conf.splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert "maxmemory" in directives
    assert directives["maxmemory-policy"][0] in {"allkeys-lru", "volatile-lru"}
    assert directives.get("appendonly", ["no"])[0] == "no"
    assert directives.get("save") in ([], ['""'], ["''"])


def test_api_waits_for_redis_and_checks_readiness(compose):
    api = compose["services"]["api"]
    assert api["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "/readyz" in " ".join(api["healthcheck"]["test"])
    devices = api["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    # API keys are required, not defaulted: ${VAR:?message}
    assert re.fullmatch(r"\$\{QASLR_API_KEYS:\?.+\}", api["environment"]["QASLR_API_KEYS"])
    assert api["environment"]["REDIS_URL"].startswith("redis://redis:")


def test_mounts_are_read_only_where_they_should_be(compose):
    api = compose["services"]["api"]
    mounts = {_substitute(v, {}).split(":")[1]: v for v in api["volumes"]}
    assert mounts["/videos"].endswith(":ro")
    assert mounts["/data/index"].endswith(":ro")
    assert "/cache/huggingface" in mounts and not mounts["/cache/huggingface"].endswith(":ro")
    # the index path the API reads lies on the index volume the indexer writes
    assert api["environment"]["QASLR_INDEX"].startswith("/data/index/")
    indexer = compose["services"]["indexer"]
    assert any(
        _substitute(v, {}).split(":")[1] == "/data/index" and not v.endswith(":ro")
        for v in indexer["volumes"]
    )
    # HF_HOME in the images is the mounted model cache
    for dockerfile in ("deploy/Dockerfile.gpu", "deploy/Dockerfile.cpu"):
        assert "HF_HOME=/cache/huggingface" in (ROOT / dockerfile).read_text()


def test_profiles_for_one_shot_jobs(compose):
    services = compose["services"]
    assert services["indexer"]["profiles"] == ["indexer"]
    assert services["indexer"]["command"][:2] == ["indexer", "build"]
    assert services["trainer"]["profiles"] == ["trainer"]
    assert services["trainer"]["command"][:2] == ["qaslr", "train"]
    assert "profiles" not in services["api"] and "profiles" not in services["redis"]


def test_every_environment_variable_is_a_setting(compose):
    known = _known_env_vars()
    for name, service in compose["services"].items():
        if name == "redis":
            continue
        unknown = _env_names(service) - known
        assert not unknown, f"{name} sets variables the settings class does not know: {unknown}"
    cpu = _load("docker-compose.cpu.yml")
    for name, service in cpu["services"].items():
        assert not (_env_names(service) - known), name
        assert (ROOT / service["build"]["dockerfile"]).is_file()


def test_env_example_documents_every_setting():
    text = (ROOT / ".env.example").read_text()
    documented = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", text, flags=re.M))
    missing = _known_env_vars() - documented
    assert not missing, f".env.example lacks {sorted(missing)}"


# -- the compose commands, run natively ------------------------------------------------------------


def _substitute(value: str, env: dict[str, str]) -> str:
    """Compose-style ${VAR:-default} / ${VAR:?err} / ${VAR} interpolation."""

    def repl(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if name in env and env[name] != "":
            return env[name]
        if op == ":-":
            return arg or ""
        if op == ":?":
            raise KeyError(f"{name} is required: {arg}")
        return ""

    return re.sub(r"\$\{([A-Z0-9_]+)(?:(:-|:\?)([^}]*))?\}", repl, value)


def _native(service: dict, mapping: dict[str, Path], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    def remap(text: str) -> str:
        for container, host in mapping.items():
            text = text.replace(container, str(host))
        return text

    environment = {k: remap(_substitute(str(v), env)) for k, v in service.get("environment", {}).items()}
    bin_dir = Path(sys.executable).parent
    command = [remap(part) for part in service["command"]]
    command[0] = str(bin_dir / command[0])
    return command, environment


@pytest.mark.slow
def test_compose_commands_run_natively(compose, tmp_path, tiny_checkpoint, sample_videos):
    redis = pytest.importorskip("redis")
    try:
        redis.Redis(host="127.0.0.1", port=6379, socket_timeout=1).ping()
    except Exception:
        pytest.skip("no Redis server on 127.0.0.1:6379")
    videos, data = tmp_path / "videos", tmp_path / "data"
    shutil.copytree(sample_videos, videos)
    (data / "index").mkdir(parents=True)
    mapping = {"/videos": videos, "/data/index": data / "index", "/cache/huggingface": tmp_path / "hf"}
    port = free_port()
    user_env = {"QASLR_MODEL": str(tiny_checkpoint), "QASLR_DEVICE": "cpu", "QASLR_API_KEYS": "k1,k2"}
    base = {k: v for k, v in os.environ.items() if not k.startswith("QASLR_") and k != "REDIS_URL"}
    base.update(OMP_NUM_THREADS="1", HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")

    # the indexer profile, as compose would run it (one-shot: no trained head here)
    command, env = _native(compose["services"]["indexer"], mapping, user_env)
    result = subprocess.run(
        [*command, "--embedder", "oneshot"], env={**base, **env}, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]

    # the api service, with the compose environment (Redis at redis:6379 becomes the local server)
    command, env = _native(compose["services"]["api"], mapping, user_env)
    env["REDIS_URL"] = env["REDIS_URL"].replace("redis://redis:", "redis://127.0.0.1:")
    command = [part if part != "8000" else str(port) for part in command]
    command = [part if part != "0.0.0.0" else "127.0.0.1" for part in command]
    with ServerProcess(command, env={**base, **env}, port=port) as server:
        url = server.url
        # the compose deployment requires API keys
        assert httpx.post(f"{url}/search", json={"query": "a red ball"}, timeout=60).status_code == 401
        r = httpx.post(
            f"{url}/search",
            json={"query": "a red ball", "top_k": 2},
            headers={"X-API-Key": "k2"},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert 1 <= len(body["results"]) <= 2
        assert body["results"][0]["evidence"]
