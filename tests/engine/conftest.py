"""A small shapes-world collection indexed with the shipped tiny-world backbone, for engine tests
whose subject is quality-bearing behaviour (the frame tier's ranking, the moments)."""

from __future__ import annotations

from pathlib import Path

import pytest

from world.corpus import CorpusConfig, make_corpus

WORLD = CorpusConfig(videos=6, seed=4242, min_duration_s=40.0, max_duration_s=60.0)


@pytest.fixture(scope="session")
def world_corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("engine_world") / "corpus", WORLD)


@pytest.fixture(scope="session")
def world_index(tmp_path_factory, world_corpus, tiny_world_checkpoint) -> Path:
    from tests.engine.build import build_oneshot_index

    return build_oneshot_index(
        world_corpus.manifest, tmp_path_factory.mktemp("engine_index") / "index", tiny_world_checkpoint
    )


@pytest.fixture(scope="session")
def world_engine(world_index, tiny_world_checkpoint):
    from engine import EngineConfig, load_engine

    engine = load_engine(EngineConfig(index=world_index, model=str(tiny_world_checkpoint)))
    yield engine
    engine.close()
