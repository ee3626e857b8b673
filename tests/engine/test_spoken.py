"""Search by what is said (engine.spoken): the FTS5 query a user's text becomes, the spoken ranking
over a real index's cues, its fusion with the visual ranking, spoken moments, clips, pages, filters
and min_score, through the engine alone."""

from __future__ import annotations

import json
import sqlite3
from types import SimpleNamespace

import pytest

from core.config import FUSION_RRF_K, Fusion
from engine.errors import InvalidRequest
from engine.spoken import SpokenMatch, SpokenPage, agreement, fuse, split_clues, spoken_query
from engine.spoken.ranking import _marked
from world.corpus import CorpusConfig, make_corpus

# what each video of the corpus says (the corpus has 6 single-event videos of 30-40 s)
SAID = {
    0: [(3.0, 5.5, "The lighthouse keeper counts seven herons"), (12.0, 14.0, "and the harbour bell rings")],
    1: [(4.0, 6.0, "harbour lights glow over the water"), (20.0, 22.5, "a violin plays near the quay")],
    2: [(8.0, 10.0, "the ferry leaves the harbour at noon"), (9.0, 11.0, "someone whistles")],  # overlapping
    3: [(2.0, 4.0, "apples, pears and a basket of plums")],
    4: [],
    5: [(15.0, 18.0, "we never speak of the lighthouse")],
}


@pytest.fixture(scope="module")
def spoken_corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("spoken_world")
    corpus = make_corpus(
        root / "corpus", CorpusConfig(videos=6, seed=515, min_duration_s=30.0, max_duration_s=40.0)
    )
    lines = []
    meta = {e["id"]: e["metadata"] for e in map(json.loads, corpus.manifest.read_text().splitlines())}
    for i, video in enumerate(corpus.videos):
        entry = {"id": video.id, "path": str(corpus.root / video.path), "metadata": meta[video.id]}
        if SAID[i]:
            srt = root / f"{video.id}.srt"
            srt.write_text(
                "".join(
                    f"{k + 1}\n00:00:{a:06.3f} --> 00:00:{b:06.3f}\n{t}\n\n".replace(".", ",")
                    for k, (a, b, t) in enumerate(SAID[i])
                )
            )
            entry["subtitles"] = str(srt)
        lines.append(json.dumps(entry))
    manifest = root / "spoken.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return corpus, manifest


@pytest.fixture(scope="module")
def spoken_engine(spoken_corpus, tiny_world_checkpoint, tmp_path_factory):
    from engine import EngineConfig, load_engine
    from tests.engine.build import build_oneshot_index

    corpus, manifest = spoken_corpus
    index = build_oneshot_index(
        manifest, tmp_path_factory.mktemp("spoken_index") / "index", tiny_world_checkpoint
    )
    # the backbone in this process (model_processes=0): these tests are about what is said, not the runtime
    engine = load_engine(EngineConfig(index=index, model=str(tiny_world_checkpoint), model_processes=0))
    yield engine
    engine.close()


def _ids(corpus):
    return [v.id for v in corpus.videos]


# -- the query --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expression",
    [
        ("the harbour bell", '"harbour" OR "bell" OR "harbour bell"'),  # the pair only ranks
        ("the a of", '"the" OR "a" OR "of" OR "the a" OR "a of"'),  # only common words: all there is
        (
            '"harbour lights" ferry',
            '("harbour lights" OR "harbour light") AND (("harbour lights" OR "harbour light") OR "ferry")',
        ),
        ('"Harbour  LIGHTS"', '("harbour lights" OR "harbour light")'),
        ("NEAR(a b) AND * OR : col:x", '"near" OR "b" OR "col" OR "x" OR "col x"'),
        ('"unbalanced quote', '"unbalanced" OR "quote" OR "unbalanced quote"'),
        (
            'say ""quoted"" "" things',
            '"say" OR "quoted" OR ("things" OR "thing") OR "say quoted" OR "quoted things"',
        ),
        ("café naïve", '"café" OR "naïve" OR "café naïve"'),
        ("red, the red door", '"red" OR "door" OR "red door"'),
    ],
)
def test_user_text_becomes_an_fts5_query_of_strings_only(text, expression):
    assert spoken_query(text).expression == expression


@pytest.mark.parametrize("text", [None, "", "   ", "!!! ... ---", '""'])
def test_text_without_words_has_no_spoken_query(text):
    assert spoken_query(text) is None


def test_snippet_marks_become_highlight_ranges():
    assert _marked("the \ue000harbour\ue001 bell \ue000rings\ue001") == (
        "the harbour bell rings",
        [(4, 11), (17, 22)],
    )


def test_hostile_text_never_reaches_fts5_as_syntax(spoken_engine):
    for text in (
        '" OR 1=1 --',
        "NOT NOT NOT",
        "harbour*",
        "a:b:c",
        "((((",
        "'; DROP TABLE cues; --",
        "NEAR/3",
    ):
        for sources in ("said", "both"):
            spoken_engine.searcher.search({"query": text, "sources": sources, "mode": "frames"})
    assert spoken_engine.index.has_cues  # nothing was dropped


# -- the spoken ranking ------------------------------------------------------------------------------
def test_said_finds_the_video_that_says_it_with_the_cue_as_moment_and_snippet(spoken_engine, spoken_corpus):
    corpus, _ = spoken_corpus
    ids = _ids(corpus)
    out = spoken_engine.searcher.search({"query": "lighthouse keeper counting herons", "sources": "said"})
    top = out.hits[0]
    assert top.video_id == ids[0] and top.source == "said" and top.stage1_rank is None
    assert top.moment == (3.0, 5.5) and top.moment_source == "cue"
    assert top.spoken.text == "The lighthouse keeper counts seven herons"
    marked = [top.spoken.snippet[a:b] for a, b in top.spoken.highlights]
    assert marked == ["lighthouse keeper counts", "herons"]  # stemmed: counting -> counts; runs merged
    assert top.spoken.coverage == pytest.approx(1.0)
    assert top.relevance == pytest.approx(1.0)  # max(visual, coverage)
    assert [h.video_id for h in out.hits] == [ids[0], ids[5]]  # "lighthouse" alone, lower
    assert out.hits[1].spoken.coverage < 0.5 and out.hits[0].score > out.hits[1].score


def test_a_quoted_phrase_must_be_said_in_order(spoken_engine, spoken_corpus):
    ids = _ids(spoken_corpus[0])
    s = spoken_engine.searcher
    assert [h.video_id for h in s.search({"query": '"harbour lights"', "sources": "said"}).hits] == [ids[1]]
    assert s.search({"query": '"lights harbour"', "sources": "said"}).hits == []
    words = {h.video_id for h in s.search({"query": "harbour lights", "sources": "said"}).hits}
    assert words == {ids[0], ids[1], ids[2]}


def test_an_index_without_cues_answers_both_exactly_as_seen(world_engine, world_corpus):
    event, _ = world_corpus.queries("single")[0]
    cases = [(event, "indexed"), (event, "frames"), (event, "rerank"), (f'{event} "and a quote"', "frames")]
    for query, mode in cases:
        seen = world_engine.searcher.search({"query": query, "sources": "seen", "mode": mode})
        both = world_engine.searcher.search({"query": query, "mode": mode})  # the default
        assert both.sources == "both"
        assert [(h.video_id, h.score, h.moment, h.relevance, h.source) for h in both.hits] == [
            (h.video_id, h.score, h.moment, h.relevance, "seen") for h in seen.hits
        ]
    said = world_engine.searcher.search({"query": query, "sources": "said"})
    assert said.hits == [] and not said.more


def test_a_page_nothing_was_said_on_is_the_visual_answer(spoken_engine, spoken_corpus):
    corpus, _ = spoken_corpus
    query, _ = corpus.queries("single")[0]  # "a red square appears": said in no cue
    seen = spoken_engine.searcher.search({"query": query, "sources": "seen", "mode": "frames"})
    both = spoken_engine.searcher.search({"query": query, "sources": "both", "mode": "frames"})
    assert [(h.video_id, h.score, h.moment) for h in both.hits] == [
        (h.video_id, h.score, h.moment) for h in seen.hits
    ]
    assert all(h.spoken is None and h.source == "seen" for h in both.hits)


def test_both_puts_the_video_that_is_seen_and_said_first(spoken_engine, spoken_corpus):
    corpus, _ = spoken_corpus
    ids = _ids(corpus)
    seen_text = corpus.videos[2].queries[0]  # video 2's event; it also says "harbour"
    query = f"{seen_text} while someone talks about the harbour"
    said = spoken_engine.searcher.search({"query": query, "sources": "said", "mode": "frames"})
    assert {h.video_id for h in said.hits} == {ids[0], ids[1], ids[2]}
    both = spoken_engine.searcher.search({"query": query, "sources": "both", "mode": "frames"})
    top = both.hits[0]
    assert top.video_id == ids[2] and top.source == "both" and top.spoken is not None
    assert top.seen_rank == 1 and top.seen_score is not None
    if spoken_engine.searcher.config.fusion == Fusion.RRF:
        expected = 1 / (FUSION_RRF_K + 1) + 1 / (FUSION_RRF_K + top.spoken.rank)
    else:  # the better relevance plus a third of the other
        expected = agreement(top.visual_relevance, top.spoken.coverage)
    assert top.score == pytest.approx(expected)
    assert top.moment_source != "cue"  # it matched by its pixels better than by its words
    assert {h.source for h in both.hits} <= {"seen", "said", "both"}


def test_filters_and_min_score_apply_to_what_is_said(spoken_engine, spoken_corpus):
    corpus, _ = spoken_corpus
    ids = _ids(corpus)
    s = spoken_engine.searcher
    hits = s.search(
        {
            "query": "lighthouse",
            "sources": "said",
            "filter": {"title": {"in": [corpus.videos[5].events[0][0]]}},
        }
    ).hits
    assert [h.video_id for h in hits] == [ids[5]]
    full = s.search({"query": "lighthouse keeper", "sources": "said", "min_score": 0.9}).hits
    assert [h.video_id for h in full] == [ids[0]]  # "lighthouse" alone covers less of the query


def test_clips_by_what_is_said_are_the_cues(spoken_engine, spoken_corpus):
    ids = _ids(spoken_corpus[0])
    out = spoken_engine.searcher.search({"query": "harbour", "sources": "said", "group_by": "clip"})
    assert sorted((c.hit.video_id, c.moment) for c in out.clips) == sorted(
        [(ids[0], (12.0, 14.0)), (ids[1], (4.0, 6.0)), (ids[2], (8.0, 10.0))]
    )
    assert all(c.source == "said" and c.cue["text"] for c in out.clips)
    both = spoken_engine.searcher.search(
        {"query": "harbour", "sources": "both", "group_by": "clip", "mode": "frames"}
    )
    spoken_moments = {(c.hit.video_id, c.moment) for c in both.clips if c.source in ("said", "both")}
    assert len(spoken_moments) == 3 and both.clips[0].source in ("said", "both")


def test_pages_by_both_show_each_video_once(spoken_engine, spoken_corpus):
    ids = _ids(spoken_corpus[0])
    s = spoken_engine.searcher
    seen, offset, skip = [], 0, 0
    while True:
        out = s.search(
            {
                "query": "harbour lighthouse",
                "sources": "both",
                "mode": "frames",
                "shortlist": 2,
                "top_k": 2,
                "offset": offset,
                "skip": skip,
            }
        )
        seen += [h.video_id for h in out.hits]
        if out.next_offset is None:  # each page starts where the last ended
            break
        offset, skip = out.next_offset, out.next_skip
    assert len(seen) == len(set(seen))
    assert {ids[0], ids[1], ids[2], ids[5]} <= set(seen)


def test_streamed_updates_are_fused_and_the_tiers_keep_their_scores(spoken_engine, spoken_corpus):
    import dataclasses

    from engine import load_engine

    ids = _ids(spoken_corpus[0])
    updates = []
    # the served heavy tier's order stands however close its call (keep_margin 0): this test is about
    # fusing what each tier scored, not about when the head's order stands (tests/engine/test_cascade_policy.py)
    engine = load_engine(dataclasses.replace(spoken_engine.config, keep_margin=0.0))
    try:
        out = engine.searcher.search(
            {"query": "violin", "sources": "both", "mode": "rerank", "heavy": 2, "shortlist": 3, "top_k": 3},
            on_update=lambda hits: updates.append([(h.video_id, h.source) for h in hits]),
        )
        heavy_name = engine.searcher.reranker.name
    finally:
        engine.close()
    assert updates and all((ids[1], "said") in u or (ids[1], "both") in u for u in updates)
    assert out.hits[0].video_id == ids[1]
    heavy = [h for h in out.hits if h.tier == heavy_name]  # the served heavy tier
    assert heavy and all(h.seen_score is not None for h in heavy)


@pytest.mark.parametrize(
    "request_, field",
    [
        ({"query": "x", "sources": "heard"}, "sources"),
        ({"query": None, "image": None, "sources": "said"}, "query"),
    ],
)
def test_bad_sources_are_invalid_requests(spoken_engine, request_, field):
    with pytest.raises(InvalidRequest) as err:
        spoken_engine.searcher.search(request_)
    assert err.value.field == field


def test_an_image_alone_cannot_search_what_is_said(spoken_engine):
    import numpy as np

    image = np.zeros((64, 64, 3), np.uint8)
    with pytest.raises(InvalidRequest, match="needs query text") as err:
        spoken_engine.searcher.search({"image": image, "sources": "said"})
    assert err.value.field == "sources"
    assert spoken_engine.searcher.search({"image": image, "sources": "both", "mode": "indexed"}).hits


# -- the fusion rule on its own ------------------------------------------------------------------------
def _hit(vid, rank, rel):
    return SimpleNamespace(video_id=vid, score=1.0 - (rank or 9) / 10, seen_rank=None, seen_score=None, spoken=None,
                           source="seen", stage1_rank=rank, rel=rel)  # fmt: skip


def _page(said: dict[str, int], coverage=0.5):
    ranking = {v: SpokenMatch(v, r, r, 0.0, 1.0, v, 1.0, coverage=coverage) for v, r in said.items()}
    return SpokenPage(spoken_query("x"), ranking, list(ranking.values()), set(), False)


@pytest.mark.parametrize("rule", list(Fusion))
def test_fusion_puts_a_video_seen_and_said_above_either_alone(rule):
    visual = [_hit("mirror", 1, 0.95), _hit("answer", 2, 0.94), _hit("other", 3, 0.6)]
    spoken_only = [_hit("talker", None, 0.5)]
    order = fuse(
        visual,
        spoken_only,
        _page({"talker": 1, "answer": 2}),
        rule=rule,
        offset=0,
        relevance_of=lambda h: h.rel,
    )
    assert [h.video_id for h in order][0] == "answer" and order[0].source == "both"
    assert order[0].seen_score == pytest.approx(0.8)


def test_rrf_lets_a_word_in_passing_outrank_the_pixels_and_relevance_does_not():
    def run(rule):
        visual = [
            _hit("answer", 1, 0.95),
            _hit("near", 2, 0.70),
        ]  # "near": a poor visual match that says a word
        order = fuse(
            visual, [], _page({"near": 1}, coverage=0.3), rule=rule, offset=0, relevance_of=lambda h: h.rel
        )
        return [h.video_id for h in order], [h.score for h in order]

    ids, scores = run(Fusion.RRF)
    assert ids == ["near", "answer"] and scores[0] == pytest.approx(1 / 62 + 1 / 61)
    ids, scores = run(Fusion.RELEVANCE)
    assert ids == ["answer", "near"] and scores == pytest.approx([0.95, 0.70 + 0.3 / 3])


def test_relevance_fusion_keeps_the_visual_order_where_nothing_was_said():
    # "b" was ranked above "a" by stage 2 although its frames score lower: fusion keeps that order
    visual = [_hit("b", 1, 0.80), _hit("a", 2, 0.99), _hit("c", 3, 0.60)]
    said_only = [_hit("d", None, 0.95)]  # outside the visual window: at most the window's last
    order = fuse(visual, said_only, _page({"d": 1}, coverage=0.2), rule=Fusion.RELEVANCE, offset=0,
                 relevance_of=lambda h: h.rel)  # fmt: skip
    assert [h.video_id for h in order] == ["b", "a", "d", "c"]
    assert [h.score for h in order] == pytest.approx([0.80, 0.80, 0.60 + 0.2 / 3, 0.60])
    assert agreement(-0.2, 0.5) == pytest.approx(0.5) and agreement(0.9, 0.9) == pytest.approx(1.2)


@pytest.mark.parametrize(
    "text, seen, said",
    [
        ('a red square appears "missing goat"', "a red square appears", '"missing goat"'),
        ('x "a b" y "c"', "x y", '"a b" "c"'),
        ('"only a phrase"', '"only a phrase"', '"only a phrase"'),
        ("no quotes", "no quotes", "no quotes"),
        ('empty "" quotes', 'empty "" quotes', 'empty "" quotes'),
    ],
)
def test_in_both_quoted_phrases_are_said_and_the_rest_is_seen(text, seen, said):
    assert split_clues(text) == (seen, said)


def test_both_with_a_quoted_phrase_searches_the_frames_without_it(spoken_engine, spoken_corpus):
    corpus, _ = spoken_corpus
    ids = _ids(corpus)
    event = corpus.videos[2].queries[0]
    s = spoken_engine.searcher
    out = s.search({"query": f'{event} "ferry leaves"', "mode": "frames"})
    assert out.hits[0].video_id == ids[2] and out.hits[0].source == "both"
    assert [h.video_id for h in out.hits if h.spoken] == [ids[2]]  # only it says the phrase
    seen = s.search({"query": event, "sources": "seen", "mode": "frames"})
    visual = [h for h in out.hits if h.seen_rank]
    assert [h.video_id for h in visual] == [h.video_id for h in seen.hits]  # the pixels saw the event alone
    assert [h.seen_score for h in visual] == pytest.approx([h.score for h in seen.hits])


def test_fusion_without_anything_said_returns_the_visual_order_untouched():
    visual = [_hit("b", 1, 0.5), _hit("a", 2, 0.99)]
    for rule in Fusion:
        order = fuse(visual, [], _page({}), rule=rule, offset=0, relevance_of=lambda h: h.rel)
        assert [h.video_id for h in order] == ["b", "a"] and [h.score for h in order] == [0.9, 0.8]


def test_an_index_whose_cue_tables_are_gone_serves_seen_and_said_quietly(
    spoken_corpus, tiny_world_checkpoint, tmp_path
):
    from engine import EngineConfig, load_engine
    from tests.engine.build import build_oneshot_index

    corpus, manifest = spoken_corpus
    single = tmp_path / "one.jsonl"
    single.write_text(manifest.read_text().splitlines()[0] + "\n")
    index = build_oneshot_index(single, tmp_path / "index", tiny_world_checkpoint)
    conn = sqlite3.connect(index / "meta.sqlite")
    with conn:
        for name in ("cues_fts", "cues", "text_tracks"):
            conn.execute(f"DROP TABLE {name}")
    conn.close()
    engine = load_engine(EngineConfig(index=index, model=str(tiny_world_checkpoint), model_processes=0))
    try:
        assert engine.searcher.search({"query": "lighthouse", "sources": "said"}).hits == []
        assert len(engine.searcher.search({"query": "lighthouse", "mode": "frames"}).hits) == 1
    finally:
        engine.close()


def test_qaslr_search_prints_what_was_said(spoken_engine, spoken_corpus, capsys):
    from qaslr.cli import main

    index = spoken_engine.config.index
    model = spoken_engine.config.model
    assert (
        main(["search", "lighthouse keeper", "--index", str(index), "--model", model, "--sources", "said"])
        == 0
    )
    out = capsys.readouterr().out
    assert "(said)" in out and "said at 3.0-5.5 s: The lighthouse keeper counts seven herons" in out


def test_said_matching_tolerates_simple_plurals():
    # issue 40: "purple walruses" (plural, quoted) found no cue that says "purple walrus"
    import sqlite3

    from engine.spoken import spoken_query

    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE cues USING fts5(text, tokenize='porter unicode61 remove_diacritics 2')")
    texts = ["a purple walrus swims by", "the harbour light is on", "two ferries leave", "nothing here"]
    db.executemany("INSERT INTO cues(rowid, text) VALUES (?, ?)", enumerate(texts, start=1))

    def said(query: str) -> set[int]:
        expression = spoken_query(query).expression
        return {r for (r,) in db.execute("SELECT rowid FROM cues WHERE cues MATCH ?", (expression,))}

    assert said('"purple walruses"') == {1}
    assert said("walruses") == {1} and said('"harbour lights"') == {2} and said("ferry") == {3}
    assert said('"purple walrus"') == {1} and said('"purple ferries"') == set()


def test_qaslr_search_runs_in_process_without_model_processes_or_a_warm_up(
    spoken_engine, monkeypatch, capsys
):
    # issue 40: one CLI query started model processes and warmed up (24.5 s); it needs neither
    import engine.api
    import engine.runtime.model_process
    from qaslr.cli import main

    def refused(*args, **kwargs):
        raise AssertionError("qaslr search started model processes or warmed up")

    monkeypatch.setattr(engine.runtime.model_process, "start_model_processes", refused)
    monkeypatch.setattr(engine.api.Engine, "warm_up", refused)
    index, model = spoken_engine.config.index, spoken_engine.config.model
    assert main(["search", "lighthouse keeper", "--index", str(index), "--model", model]) == 0
    assert "lighthouse" in capsys.readouterr().out.lower()
