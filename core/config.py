"""Every constant more than one module needs, in one place (imports nothing from the project).

Modes are ``StrEnum`` members: they compare equal to, and serialise as, their plain strings, so the
manifest on disk, the API's JSON and command-line choices keep the same spelling.
"""

from __future__ import annotations

from enum import StrEnum


class Embedder(StrEnum):
    """How videos are embedded: the streaming head over clips, or one backbone context."""

    QASLR = "qaslr"  # clips of L frames -> evidence tokens -> streaming head (needs a head)
    ONESHOT = "oneshot"  # the backbone embeds all selected frames at once (zero-shot baseline)


class SearchMode(StrEnum):
    """What ``POST /search`` runs: stage 1 only, stage 1 and the frame tier, or the whole cascade."""

    INDEXED = "indexed"  # FAISS over the stored, query-independent embeddings
    FRAMES = "frames"  # + the frame tier: the shortlist ranked by its frame banks (no backbone call)
    RERANK = "rerank"  # + the heavy tier (query-aware selection, query-conditioned encoding) on the top


class TextConditioning(StrEnum):
    """Where a query-conditioned encoding (stage 2) puts the query text in the backbone prompt."""

    NONE = "none"  # no text: the frames alone (selection and a query-conditioned head carry the query)
    AFTER = "after"  # after the video, the reference embedder's order (causal: visual states unchanged)
    BEFORE = "before"  # before the video, so every visual hidden state is computed in the query's light


# -- the model ------------------------------------------------------------------------------------
DEFAULT_MODEL_ID = "Qwen/Qwen3-VL-Embedding-2B"

# -- how a video is embedded at index time (paper §3.2) --------------------------------------------
DEFAULT_MAX_FRAMES = 128  # K: frames selected uniformly per video
DEFAULT_CLIP_LEN = 16  # L: frames per clip at the full budget
DEFAULT_MAX_EVIDENCE = 256  # M: evidence tokens kept per clip
# A checkpoint directory may carry the stage-2 rerank head trained for its backbone in this subfolder
# (the tiny-world checkpoint does: `qaslr make-checkpoint --preset tiny-world`); the engine serves it
# when no head is named (engine.loader.load_rerank_model).
CHECKPOINT_HEAD_DIR = "rerank_head"
# Added to the stage-2 batcher threads' nice value on Linux (engine.runtime.batching), so that the cheap stages of
# other searches go first on a busy CPU (benchmarks/bench_load.py: stage-1 p95 under rerank load)
BATCH_NICE = 10
# Added to the search threads' nice value on Linux (engine.runtime.admission): a rerank search's own stages yield a
# busy core to the light lane's stage-1 searches, and take one from the batched encodes (BATCH_NICE is more).
SEARCH_NICE = 5
# Searches whose cheap stages run at once (with batching) when none are configured: the cores plus one.
# More at once only share the cores and the interpreter lock: on 2 cores the default cascade under 8
# clients gave 10.7-11.4 req/s with every admitted search running and 12.7-13.7 with 3 slots (quiet
# runs of benchmarks/bench_load.py; docs/results.md).
# A search waiting for the batcher gives its slot up meanwhile, so the heavy tier still gathers every
# admitted search's clips into shared backbone calls. Time spent waiting for a slot is the answer's `queue`.
CPU_SLOTS_PER_CORE, CPU_SLOTS_EXTRA = 1, 1
# Threads of the light lane: stage-1-only searches (mode=indexed) run there, so they never wait for a
# search thread held by a rerank.
LIGHT_LANE_THREADS = 2
CHECKPOINT_TIME_HEAD_DIR = "time_head"  # a checkpoint's own time head (models.time_head), served by default

# -- the frame bank (candidate frames for stage 2) -------------------------------------------------
BANK_PER_SECOND = 1.0  # candidate frames per second of video
# At most this many per video: 1 per second up to 4 hours, so the bank's density does not fall with a
# video's length (a 256 cap left an hour-long video one bank frame every 14 s, and stage 2 cannot find
# an event the bank never kept). Recorded in each index's manifest (``candidate_policy``).
BANK_MAX_FRAMES = 4 * 3600
# The cap of indexes built before that change; a manifest that records no cap was built with it.
BANK_LEGACY_MAX_FRAMES = 256


# -- index build throughput (`indexer build|add`; not recorded in the index) -----------------------
INDEX_BATCH_VIDEOS = 4  # videos per model batch; their clips share backbone calls
INDEX_CLIP_BATCH = 8  # clips per backbone forward pass
INDEX_IMAGE_BATCH = 32  # frame-bank frames per backbone image call
# A video with more bank frames than this decodes, stores and embeds its bank this many frames at a
# time (one chunk ahead), so a build's pixels in memory stay bounded however long its videos are;
# shorter videos decode their bank with their K frames at once, as before. 512 (8.5 min at 1 fps)
# keeps every 2-5 min video on the one-pass path: at 256, videos of 257-300 bank frames took the
# chunked path and a build of six 2-5 min videos ran 1.20x the old 256-frame bank's wall time
# (farm-bench, paired runs); two chunks at 448 px hold about 0.6 GB.
INDEX_BANK_CHUNK = 512
INDEX_DECODE_WORKERS = 2  # decode threads running ahead of the model
# Edge frames (indexer.edges): per video, the source frames inside the EDGE_GAPS gaps of its frame
# bank with the largest change between consecutive bank frames (at most EDGE_FRAMES_PER_GAP each, the
# frames engine.refine scores inside an edge's gap) are embedded at build time and stored, so the
# top result's moment is refined without a decode or a backbone call when its edges lie in them.
EDGE_GAPS = 8
EDGE_FRAMES_PER_GAP = 8


def candidate_policy(per_second: float = BANK_PER_SECOND, max_frames: int = BANK_MAX_FRAMES) -> dict:
    """The frame-bank policy as recorded in an index manifest."""
    return {"per_second": float(per_second), "max_frames": int(max_frames)}


# -- stage 1: which FAISS index an index gets by its size ------------------------------------------
# Exact search (Flat) up to this many videos, IVF beyond. `indexer build` chooses by the source's size,
# `indexer add` and `indexer compact` switch when the corpus crosses it. Chosen from
# benchmarks/bench_faiss_types.py (docs/architecture.md, "FAISS index types").
FAISS_EXACT_MAX_VECTORS = 50_000
FAISS_EXACT_FACTORY = "IDMap2,Flat"
# Beyond the threshold: IVF with an explicit flat coarse quantizer, nlist = 4 * sqrt(2^k) for the
# octave 2^k <= N < 2^(k+1) (indexer.store.faiss_index.ivf_lists). The "(Flat)" spelling marks the
# automatic choice (a factory forced with --faiss-factory stays as it is). Measured at 1M clustered
# vectors, d = 256, one thread per query, 2 cores shared (load ~10; docs/bench/faiss_types_1m.json):
# IVF2896 with nprobe 32 keeps 99.8 % of Flat's top 10 at 2.1 ms median (1.8 ms CPU), nprobe 16
# 99.1 % at 1.2 ms, nprobe 64 99.9 % at 3.2 ms CPU; Flat takes 115 ms CPU, and HNSW32 with efSearch
# 128 kept only 81 % (docs/architecture.md). Unlike HNSW, IVF removes in place and goes to the GPU.
# It is trained when the corpus crosses the threshold, re-trained by `indexer add` when N enters a
# new octave (at most once per doubling of N) and by every `indexer compact`.
FAISS_ANN_FACTORY = "IDMap2,IVF{nlist}(Flat),Flat"
FAISS_IVF_LISTS_PER_SQRT = 4.0  # nlist = this * sqrt(octave of N)
FAISS_IVF_MIN_TRAIN_PER_LIST = 39  # FAISS's minimum of training points per list (fewer: exact search)
FAISS_IVF_TRAIN_PER_LIST = 40  # k-means sample per list (FAISS caps at 256; the 1M build above: 141 s)
FAISS_IVF_NPROBE = 32  # lists searched: min(this, nlist / 8), at least 1 (32: the measurement above)
# the automatic ANN type of earlier versions: switched to the IVF above by the next add or compact
FAISS_LEGACY_ANN_FACTORIES = ("IDMap2,HNSW32,Flat",)
FAISS_HNSW_EF_SEARCH = 128  # HNSW search breadth (at least the k asked for); FAISS's default is 16

# Stage 1 of a query for the streaming head also ranks every video by its selection query's best bank
# frame (indexer.store.frame_scan): every bank in one float32 matrix in memory, an exact scan per such
# query. Up to this size only (frames x d x 4 bytes; 1000 hour-long videos at ~1 fps and d = 128, the
# tiny world's, take 1.8 GB); a larger index keeps stage 1's FAISS rankings alone, and the log says so.
FRAME_SCAN_MAX_BYTES = 2 << 30


class FrameStore(StrEnum):
    """How an index keeps the pixels of its frame-bank frames (``indexer build --frame-store``), so
    that stage 2 reads them from the index instead of decoding the source video. Chosen by
    benchmarks/bench_cold_rerank.py (docs/architecture.md, "The frame store")."""

    NONE = "none"  # no pixels kept: stage 2 decodes from the source video (the old behaviour)
    JPEG = (
        "jpeg"  # JPEG quality 95, 4:4:4 chroma: small and fast to decode, lossy (scores within a tolerance)
    )
    PNG = "png"  # lossless (exact scores), larger and several times slower to decode at 448 px
    LZ4 = "lz4"  # raw pixels, LZ4-compressed: lossless and fastest, but the largest


DEFAULT_FRAME_STORE = FrameStore.JPEG
FRAME_STORE_JPEG_QUALITY = 95  # with 4:4:4 chroma (no subsampling): max pixel error ~15 of 255


# -- stage 2 --------------------------------------------------------------------------------------
QFRAME_TEMPERATURE = 0.25  # query-aware selection, in units of the frame scores' spread (models.selection)
# Where a query-conditioned encoding puts the query text in the backbone prompt, by default: one
# default for serving (one-shot stage 2) and for training (`qaslr train` / `qaslr eval`, the feature
# cache, a new head's config), so a head is trained on the evidence stage 2 will give it. Chosen by
# measurement (benchmarks/bench_quality.py, shapes world, 3 seeds, Hit@1, one-shot stage 2): none
# 87.5 +- 2.6, after 79.2 +- 1.5, before 76.0 +- 1.5 (stage 1: 59.4 +- 4.4). The query already chose
# the frames; putting its text in the prompt moved v_ij further from v_j and ranked worse.
DEFAULT_TEXT_CONDITIONING = TextConditioning.NONE


class FrameAggregate(StrEnum):
    """How the frame tier turns a candidate's bank relevance q·f_c into one score (engine.tiers.frame)."""

    MAX = "max"  # the best single bank frame
    TOP2 = "top2"  # the mean of the two best
    Z = "z"  # the best frame's robust z-score against the video's own frames


FRAME_AGGREGATE = FrameAggregate.MAX


# The cascade's heavy tier re-encodes the frame tier's top this many candidates (a request may ask
# for 0..R with `heavy`); chosen by benchmarks/bench_quality.py (docs/results.md).
DEFAULT_HEAVY = 3
# ... and only when the frame tier's first two scores lie within this (its answer is too close to call).
# 0 = never unless a request asks (heavy, or heavy_margin > 0); 2 = always. Measured (bench_quality,
# docs/results.md): at 0.05 the one-shot heavy tier on close calls changed single-event Hit@1 against
# the frame tier's by 0, +1, -2 and -1 queries in four runs (276 queries, 2-20 min videos): it did not
# earn its cost (up to a second a query), so single-event queries stop at the frame tier; order and
# count queries go to the time head (engine.tiers.timehead) whatever this is.
DEFAULT_HEAVY_MARGIN = 0.0
# A query the rerank head's router calls about time (motion or change, an order, a count) goes to a
# streaming head that reads moments (engine.search.cascade) when the frame tier's first candidates lie
# within TIE_MARGIN of its best (it cannot tell them apart: a video and its reversal, its mirror, its
# count partner hold the same frames), at most HEAD_CANDIDATES of them (what the head was trained to
# rerank); the head's order stands where its best beats the frame tier's first by KEEP_MARGIN on its
# own score. Chosen on the development seeds of training/moment_head.py (MomentRecipe.dev_seeds). The
# tie is measured on the selection query's frame scores where the head ships one (q_sel · f_c: a video
# showing the events the query names scores about 0.6-0.9, one without them 0.0-0.5); on development
# seeds 0 and 4 of benchmarks/bench_quality.py (24 motion queries over the collection, Hit@1) a wider
# margin read more candidates (0.05 0.25, 0.1 0.33, 0.2 0.38 with HEAD_FRAME_WEIGHT) but sent a
# single-event query its router misreads to the head ("white triangle shows up briefly",
# tests/engine/test_time_routing.py): 0.05 stayed. Since the head reads each moment backwards too
# (HEAD_REVERSAL_WEIGHT) a tie sends it to q_sel's first HEAD_CANDIDATES, and a reversal pair, one shape
# shown by both videos, can lie apart under q_sel where the bank's frames catch the moving shape in other
# places (the demo's corpus given a reversal pair: a magenta circle moving down 0.87, moving up 0.79; the
# head did not run and the frame tier's first, a green square, stood). Since the router was fitted on the
# world's texts (training.router_texts) it calls no single-event text of the world about time, and the
# wider margin no longer sends "white triangle shows up briefly" to the head. On development seeds 0, 4, 5
# and 6 at 60-120 s (48 motion queries over each time collection and within each pair, 24 single events;
# training/tiny_world/README.md): the router before at 0.05 put the right video first 40 times over the
# collection and 41 within the pair, the head reading 1 single-event query; the router fitted on the texts
# at 0.05: 40, 41 and none; at 0.1: 40, 43 and none (at 1 on seeds 5 and 6: as at 0.1).
DEFAULT_TIE_MARGIN = 0.1
DEFAULT_HEAD_CANDIDATES = 6
# The keep margin: 0 until the head's score took the frame bank's evidence (below); since then, on the
# same development seeds, the head's first beat the frame tier's first by under 0.02 on 4 motion pairs of
# 24, 3 of them wrongly (margin 0: within the pair 0.63; 0.02-0.05: 0.71; over the collection 0.25
# either way, 0.21 at 0.1). Held-out seed 3 had shown such a hair (0.002) put a wrong first above the
# frame tier's right one on a single-event query its router misread ("there is a white bar"), before
# this margin was chosen on seeds 0 and 4. Since q_sel's term took its own weight (HEAD_SELECTION_WEIGHT,
# below) the scores it compares carry twice q_sel's best frame, and on development seeds 0, 4 and 5 (36
# motion queries, the same dump) margins 0 to 0.01 put the right video of its pair first 32 times, 0.015
# 31, 0.02 to 0.05 30 (a video and its reversal an inch apart on the head's reading); over the collection
# 21 and the single events 17 of 18 at every margin. 0.01, which still covers seed 3's 0.002 hair.
DEFAULT_KEEP_MARGIN = 0.01
# ... and each candidate the head read scores q · z_T + HEAD_FRAME_WEIGHT · (max_c q_sel · f_c + max_c
# q · f_c) (the head reads how the moments change, the frame bank whether the events the query names
# show at all). On the same development seeds, weights on (q_sel, q) of 0 (the head alone) gave motion
# Hit@1 0.17 (margin 0.05; 0.29 at 0.2); at margin 0.2, (0.5, 0) 0.38, and a wrong first above the frame
# tier's on 1 of the 30 ordinary sentences of tests/engine/test_time_routing.py; (0.5, 0.5) 0.38 and
# none; (1, 1) 0.42 and none; (0.25, 1) 0.21; at margin 0.05, (0.5, 0.5) and (1, 1) 0.25.
DEFAULT_HEAD_FRAME_WEIGHT = 0.5
# ... and the selection query's term its own weight: s = q · z_T + HEAD_SELECTION_WEIGHT · max_c q_sel · f_c
# + HEAD_FRAME_WEIGHT · max_c q · f_c. The head's q · z_T reads a change well within a reversal pair, but
# across videos it often puts another shape or colour first ("a blue square gets bigger": a green triangle
# that shrinks, q · z_T 0.25 against the right one's -0.28), where q_sel's best frame tells them apart
# (0.06 against 0.73). On development seeds 0, 4 and 5 of benchmarks/bench_quality.py (36 motion queries
# over each time collection, read from one dump of every served search's terms, the head reading all of
# q_sel's first 6), motion Hit@1 for this weight 0.5 (the weight before, HEAD_FRAME_WEIGHT's) 17 / 36, 1.0
# 18, 1.5 20, 2.0 21, 2.5 and 3.0 20; the 18 single-event queries 17 at every weight. Served with 2.0 (the
# same seeds, default settings): over the collection 21 / 36 (17 before), within the pair 30 (31: "a blue
# square gets bigger" beat its reversal by 0.046, under the keep margin then, 0.05; 32 at 0.01, above).
# (Tie margin 0.1 added a query: not changed.) Since the selection query took its residual branch
# (training.selection_query: q_sel lies nearer the still text of the events a query names), the same seeds,
# served: weights 1, 2, 2.5, 3, 4 put the right video first for 28, 28, 29, 30, 30 of the 36 motion
# queries, within the pair 32 each, the single events 17 of 18 each; 3 with tie margin 0.1 31 (not
# changed, as above). Served with 3.
DEFAULT_HEAD_SELECTION_WEIGHT = 3.0
# ... and the head's reading of each moment played backwards (models.windows.played_backwards): s +=
# HEAD_REVERSAL_WEIGHT · (q · z_T - q · z_T backwards), the head then reading every one of q_sel's first
# head_candidates. A still showing of the shape reads nearly the same either way, a change as its opposite:
# on development seeds 0, 4, 5 and 6 at 60-120 s (48 motion queries over each time collection, the shipped
# head), the difference lay within -0.054..0.049 (10th-90th percentile) for the 77 other videos the head
# read, 0.005..0.341 for the right one (above 0 for 90 %), -0.323..-0.012 for its reversal, while the frame
# bank's terms favour a still showing's crisp frames (a count video's orange circles above the moving one).
# Read offline from those searches, the head reading all 6: weights 0, 2, 3, 4, 5, 6, 8 put the right
# video first for 37, 38, 39, 40, 38, 38, 37 of the 48, within the pair 43, 43, 44, 45, 45, 45, 45.
DEFAULT_HEAD_REVERSAL_WEIGHT = 4.0
# An order of two events read by a streaming head that reads the query's words (engine.search.cascade:
# the order route): each candidate it read scores s = q · z_T + ORDER_EVENT_WEIGHT · min_k max_t p_k · f_t
# (its reading of which event shows first, plus whether both show at all). Chosen on development seeds 0
# and 4 of benchmarks/bench_quality.py (10 order queries each, the head of training/tiny_world/README.md's
# "Order" section; none ships with query_words, so the route is off by default): weights 0, 1, 2, 4 put
# the right video above its mirror for 70, 70, 80, 75 % of them, first over the collection 50, 55, 70,
# 65 % (the time head: 100 and 90 %, which is why it keeps serving order; training/tiny_world/README.md,
# "Served through the order route": docs/bench/order_route.json now holds a later run at this weight).
DEFAULT_ORDER_EVENT_WEIGHT = 2.0
# Moments of the first this many results are refined at the source's frame rate (engine.refine).
# Refining costs a decode of the source around each edge: with 3, refinement was 86 % of the default
# cascade's p50 (403 of 469 ms; bench_quality seeds 0-2), for R1@0.7 that is measured on the top-1.
DEFAULT_REFINE_MOMENTS = 1


# A relevance a user can read (engine.relevance): the best frame's cosine with the query less
# RELEVANCE_NULL_WEIGHT times the query's median cosine over NULL_SAMPLE_FRAMES frames drawn from the
# whole collection; results below MIN_RELEVANCE are "no good match" (the page says so). Chosen on the
# shapes world's seeds 0 and 1 (64 single-event queries, each also searched with its own video
# filtered out, and 10 out-of-world queries; weights 0-1, thresholds 0-1.5): at 0.25 and 0.85, 91.9 % of
# correct top-1 hits stay above while 95.3 % of absent-event and 95 % of out-of-world top-1s fall below
# (weight 0: 85.5 / 96.9 / 90.0 at best; weight 1: 85.5 / 85.9 / 100). bench_quality.py re-measures
# it on every run (docs/results.md).
NULL_SAMPLE_FRAMES = 2048
RELEVANCE_NULL_WEIGHT = 0.25
MIN_RELEVANCE = 0.85


# -- what is said (engine.spoken): subtitles fused with pixels ---------------------------------------
class Sources(StrEnum):
    """What ``POST /search`` ranks by: what is seen (the frames), what is said (the videos' cues), or both."""

    SEEN = "seen"  # the visual ranking alone (stage 1 and the cascade), as before cues existed
    SAID = "said"  # the cues alone: SQLite FTS5, BM25, best cue per video
    BOTH = "both"  # the two rankings fused (FUSION); a page nothing was said on is the visual answer


# "both" is the default: an index without cues, or a page on which no cue matches the query, gets
# exactly the visual answer (nothing is fused: order, scores and moments are those of "seen"), and
# where a cue does match, what was said is found without asking for it.
DEFAULT_SOURCES = Sources.BOTH


class Fusion(StrEnum):
    """How "both" fuses the visual ranking with the spoken one (engine.spoken)."""

    RRF = "rrf"  # reciprocal rank fusion: 1/(k + rank seen) + 1/(k + rank said), k = FUSION_RRF_K
    # the two calibrated relevances (0..1): the better one plus FUSION_AGREEMENT of the other, the
    # visual one kept in the visual ranking's order (a soft AND: both agreeing beats either alone)
    RELEVANCE = "relevance"


FUSION_RRF_K = 60  # the k of reciprocal rank fusion (Cormack et al. 2009)
FUSION_AGREEMENT = 1 / 3  # the weight of the weaker source under Fusion.RELEVANCE
# Chosen by benchmarks/bench_hybrid.py on seeds 10 and 11 (the reported seeds are 0-2): RRF found the
# videos both seen and said but let a partial spoken match (a colour word in passing) outrank a
# video found by its pixels alone, and a random visual rank outrank a full spoken match; the weight
# 1/3 was the largest of 1/4, 1/3, 1/2, 3/4, 1 that lost no seen-only query there (docs/results.md).
DEFAULT_FUSION = Fusion.RELEVANCE


# -- request limits (the API's schema and the searcher both enforce these) ----------------------
MAX_QUERY_CHARS = 1000
# A query must hold a character other than these (ASCII white space), and is trimmed of them; the
# API schema states the same rule as a pattern, so the document and the server agree exactly.
QUERY_BLANKS = " \t\n\r\x0b\x0c"
QUERY_PATTERN = r"[^ \t\n\r\x0b\x0c]"
DEFAULT_TOP_K = 10
MAX_TOP_K = 100
DEFAULT_SHORTLIST = 10  # R (paper Table 4)
MAX_SHORTLIST = 200
# K' stage-2 frames per candidate. The paper uses 128 (on an H100). 32 is the CPU-friendly default:
# stage-2 cost grows linearly with K', and in the shapes world the selector already finds 99.6 % of
# an event's bank frames at K' = 32 (benchmarks/bench_quality.py). On a GPU, QASLR_DEFAULT_FRAMES=128
# gives the paper's setting.
DEFAULT_FRAMES = 32
MAX_FRAMES = 128  # bound on K' (paper K <= 128); a server may configure less
MAX_SEED = 2**53 - 1  # exactly representable as a JSON (double) number
MAX_FILTER_FIELDS = 32
MAX_FILTER_KEY_CHARS = 128
MAX_FILTER_VALUES = 256  # entries of one {"in": [...]} list
MAX_FILTER_STRING_CHARS = 1000
MAX_VIDEO_ID_CHARS = 512
MAX_BODY_BYTES = 64 * 1024  # request bodies beyond this are refused (413) before parsing


# -- the application's version ----------------------------------------------------------------------
PACKAGE = "qaslr-search"
FALLBACK_VERSION = "0.0.0+unknown"


def app_version() -> str:
    """The installed package's version (pyproject.toml), or a fallback when running from a source
    tree that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return FALLBACK_VERSION
