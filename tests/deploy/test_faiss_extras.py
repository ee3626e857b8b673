"""One FAISS package per install: faiss-cpu and faiss-gpu both install the module ``faiss``, over each
other, so neither is a core dependency. The ``cpu`` extra (named by every default install: setup.sh,
the CPU image, CI) brings faiss-cpu and the ``gpu`` extra brings faiss-gpu instead of it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
FAISS_PACKAGES = {"faiss-cpu", "faiss-gpu"}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;@]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _installs(text: str) -> list[set[str]]:
    """The extras named by each `pip install ... .[a,b]` in a script or Dockerfile, and by each install
    profile of scripts/setup.sh (`spec='.[a,b]'`, which its pip install then takes)."""
    pattern = r"(?:pip install[^\n]*?|spec=')\.\[([a-z0-9_,-]+)\]"
    return [set(m.split(",")) for m in re.findall(pattern, text)]


def test_faiss_is_no_core_dependency_and_each_extra_has_exactly_one():
    project = _project()
    assert not {_name(r) for r in project["dependencies"]} & FAISS_PACKAGES
    extras = project["optional-dependencies"]
    assert [_name(r) for r in extras["cpu"]] == ["faiss-cpu"]
    assert [_name(r) for r in extras["gpu"]] == ["faiss-gpu"]
    for name, reqs in extras.items():
        names = {_name(r) for r in reqs}
        assert not names & {"qaslr-search"}, f"extra {name!r} pulls in another extra of the project"
        if name not in ("cpu", "gpu"):
            assert not names & FAISS_PACKAGES, f"extra {name!r} brings a FAISS package"
    # the same version on both sides, so a CPU and a GPU install read each other's index files
    versions = {r.split("==")[1] for r in extras["cpu"] + extras["gpu"]}
    assert len(versions) == 1


def test_every_install_names_one_faiss_extra():
    scripts = {
        "scripts/setup.sh": (ROOT / "scripts/setup.sh").read_text(),
        "deploy/Dockerfile.cpu": (ROOT / "deploy/Dockerfile.cpu").read_text(),
        "deploy/Dockerfile.gpu": (ROOT / "deploy/Dockerfile.gpu").read_text(),
    }
    for path, text in scripts.items():
        assert not re.search(r"pip install[^\n]*?\s\.(\s|$|&|;)", text), f"{path} installs . without FAISS"
        installs = _installs(text)
        assert installs, f"{path} installs no extra"
        for extras in installs:
            assert len(extras & {"cpu", "gpu"}) == 1, f"{path}: {sorted(extras)} must name cpu or gpu"
    assert all("cpu" in e for e in _installs(scripts["scripts/setup.sh"]))
    assert all("cpu" in e for e in _installs(scripts["deploy/Dockerfile.cpu"]))
    gpu_image = _installs(scripts["deploy/Dockerfile.gpu"])
    assert {"cpu"} in gpu_image and {"gpu"} in gpu_image  # FAISS_GPU=1 picks gpu, else cpu, never both


def test_a_lock_file_pins_cpu_faiss_only():
    """requirements.lock (the default, CPU install) pins faiss-cpu and not faiss-gpu; a GPU lock, when
    there is one, the other way round."""
    for lock, wanted in (("requirements.lock", "faiss-cpu"), ("requirements-gpu.lock", "faiss-gpu")):
        path = ROOT / lock
        if not path.exists():
            continue
        pinned = {
            _name(line) for line in path.read_text().splitlines() if line.strip() and line[0] not in "#- "
        }
        assert pinned & FAISS_PACKAGES == {wanted}, f"{lock} pins {sorted(pinned & FAISS_PACKAGES)}"


def test_import_faiss_here_is_a_working_cpu_faiss():
    import faiss

    from indexer.store import faiss_index as fx

    assert fx.gpu_count() == 0
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 16)).astype(np.float32)
    index, factory = fx.make_faiss_index("Flat", 16, x, np.arange(100, 164))
    assert factory == "IDMap2,Flat" and isinstance(index, faiss.Index)
    _, labels = index.search(x[:3], 1)
    assert labels[:, 0].tolist() == [100, 101, 102]
