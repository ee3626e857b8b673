"""Train the QASLR rerank head that answers what one frame cannot show: motion and change ("a red
square moves from left to right"), order ("A, then B", "B after A", "A before B") and count ("...
appears twice", "... three times"), by the paper's recipe (Eq. 11-14; training/moment_head.py).

It renders shapes-world splits (single events, mirror pairs, once / twice and twice / three-times
pairs, reversal pairs; cached under --workdir), indexes them with the backbone, trains the selection
query (models.router: where selection looks for a query about time's moments) on the world's texts,
encodes each query's candidates' moments (chosen by it, read as serving reads them, from the index's
frame store) and trains the head on --train-seeds' splits, measuring it on --dev-seeds' (the seeds
every constant was chosen on) against the frame tier on the same candidates, with the Table 5
controls and the Table 6 partial readouts. OUT holds the head (head_config.json, head.safetensors),
its router (router.json: which queries are about time), its selection query (selection.safetensors)
and training.json (the recipes, the time they took, the measurements). A checkpoint's rerank_head/
folder is served by default, or serve one with QASLR_RERANK_HEAD=OUT. On 2 cores the data takes
about 16-20 minutes the first time (rendering, indexing and reading every candidate's moments; 5
minutes once cached) and training 20 epochs 4-10 minutes. The shapes-world checkpoint ships the
head it trains: what it learns, and where it falls short, is in training/tiny_world/README.md ("The
rerank head").

``--selection-only`` refits the selection query of the head already in OUT by the current recipe and
leaves the head's weights as they are (about a minute on 2 cores: it embeds the world's texts once);
training.json then keeps the record of the selection query the weights were trained beside
(``selection_trained_beside``).
The router is fitted on the world's texts (training.router_texts: every text the world says, not the
splits' queries). ``--router-only`` refits the router of a head already in OUT so (a head trained before
fitted it on the splits' queries) and leaves the rest as it is (under a minute on 2 cores); training.json then keeps the record of the router fitted beside the
weights (``router_trained_beside``).
``--linear-selection`` trains with the selection query's recipe before its residual branch
(training.selection_query.LINEAR_RECIPE). The shipped head is reproduced by the three in turn:

    qaslr train-rerank-head OUT --linear-selection && qaslr train-rerank-head OUT --selection-only \
        && qaslr train-rerank-head OUT --router-only

``--order-contrast`` and ``--composed-orders N`` train for order: each order query's own video with its
clips the other way round as one more negative, and N order queries composed from the splits' clips of
two still events (training.order_mix), ``--composed-same-colour SHARE`` of them with all four events one
colour's shapes (told apart by shape alone). ``--query-words`` gives the head the query's words besides its
token states (each prompt token's input embedding and place: the backbone's final states all but drop
"before" / "after"). None ships: with them the head's order stayed far below the time head's
(training/tiny_world/README.md, "Order: what the head did not learn")."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    from core.config import DEFAULT_HEAD_FRAME_WEIGHT, DEFAULT_HEAD_SELECTION_WEIGHT
    from training.moment_head import MomentRecipe

    r = MomentRecipe()
    p.add_argument("out", help="output directory for the head")
    p.add_argument("--model", default=None, help="backbone checkpoint (default: the shipped tiny-world one)")
    p.add_argument("--workdir", default=None,
                   help="renders, indexes and encoded moments, reused by later runs (default: "
                   "qaslr-rerank-head under the temp directory)")  # fmt: skip
    p.add_argument(
        "--train-seeds", type=int, nargs="+", default=list(r.train_seeds), help="splits to train on"
    )
    p.add_argument("--dev-seeds", type=int, nargs="+", default=list(r.dev_seeds),
                   help="splits measured during and after training (where the constants were chosen)")  # fmt: skip
    p.add_argument("--epochs", type=int, default=r.epochs, help="passes over the training queries")
    p.add_argument("--lr", type=float, default=r.lr, help="AdamW learning rate (cosine to 0)")
    p.add_argument("--seed", type=int, default=r.seed, help="the head's initialisation and batch order")
    p.add_argument("--selection-weight", type=float, default=r.selection_weight,
                   help="train the head's score beside this times each candidate's best frame by the "
                   f"selection query (served: {DEFAULT_HEAD_SELECTION_WEIGHT:g}; default {r.selection_weight:g}: q · z_T alone)")  # fmt: skip
    p.add_argument(
        "--frame-weight",
        type=float,
        default=r.frame_weight,
        help=f"... and this times its best frame by the query (served: {DEFAULT_HEAD_FRAME_WEIGHT:g}; "
        f"default {r.frame_weight:g})",
    )
    p.add_argument("--order-contrast", action="store_true",
                   help="every order query's own video also stands as a negative with its clips in the other "
                   "order (training.moment_head.order_contrast)")  # fmt: skip
    p.add_argument("--composed-orders", type=int, default=r.composed_orders,
                   help="also train on this many order queries composed from the splits' clips of two "
                   "still events (training.order_mix)")  # fmt: skip
    p.add_argument("--composed-same-colour", type=float, default=r.composed_same_colour, metavar="SHARE",
                   help="the share of the composed order queries whose events are all one colour's shapes, "
                   "told apart by shape alone (training.order_mix)")  # fmt: skip
    p.add_argument("--query-words", action="store_true",
                   help="the head reads the query's words (each prompt token's input embedding and place) "
                   "besides its token states (models.head query_words)")  # fmt: skip
    p.add_argument("--linear-selection", action="store_true",
                   help="train the selection query by its recipe before the residual branch (a linear map, "
                   "600 steps): the one the shipped head's weights were trained beside")  # fmt: skip
    p.add_argument("--selection-only", action="store_true",
                   help="refit the selection query of the head in OUT by the current recipe (or "
                   "--linear-selection's), its weights untouched; renders and trains nothing else")  # fmt: skip
    p.add_argument("--router-only", action="store_true",
                   help="refit the router of the head in OUT on the world's texts (training.router_texts), "
                   "its weights and selection query untouched; renders and trains nothing else")  # fmt: skip
    p.add_argument("--threads", type=int, default=2, help="torch threads")


def run(args: argparse.Namespace) -> int:
    from training.threads import torch_threads

    with torch_threads(args.threads):  # given back after the run (a caller in the same process keeps its own)
        return _train(args)


def _train(args: argparse.Namespace) -> int:
    import dataclasses
    import json
    import time
    from pathlib import Path

    from training.moment_data import attach_words, describe
    from training.moment_head import MomentRecipe, evaluate, moment_splits, router_accuracy, save, train_head
    from training.order_mix import composed_split
    from training.router_texts import train_router_on_texts
    from training.selection_query import LINEAR_RECIPE, SelectionRecipe

    selection_recipe = LINEAR_RECIPE if args.linear_selection else SelectionRecipe()
    if args.selection_only:
        return _refit_selection(args, selection_recipe)
    if args.router_only:
        return _refit_router(args)
    recipe = dataclasses.replace(
        MomentRecipe(), train_seeds=tuple(args.train_seeds), dev_seeds=tuple(args.dev_seeds), epochs=args.epochs,
        lr=args.lr, seed=args.seed, selection_weight=args.selection_weight, frame_weight=args.frame_weight,
        order_contrast=args.order_contrast, composed_orders=args.composed_orders,
        composed_same_colour=args.composed_same_colour, query_words=args.query_words,
    )  # fmt: skip
    work, model = _workdir_and_model(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    selection, selection_record, (train, dev) = moment_splits(
        work, model, recipe, recipe.train_seeds, recipe.dev_seeds, selection_recipe=selection_recipe
    )
    print(json.dumps({"selection query": selection_record}, indent=1))
    composed = composed_split(work, model, recipe, train)  # the head trains on them too, the router not
    if recipe.query_words:
        attach_words(work, recipe.train_seeds[0], model, recipe.corpus, train + composed + dev)
    data_s = time.perf_counter() - started
    sample = train[0].items[0]
    hidden, embed = sample.states.shape[-1], sample.q.shape[-1]
    max_evidence = max(e[0].shape[0] for s in train for e in s.evidence.values())
    with open(out / "train_log.jsonl", "w") as log:
        head, history = train_head(train + composed, dev, recipe, hidden=hidden, embed=embed,
                                   max_evidence=_index_m(model, max_evidence), log=log)  # fmt: skip
    train_s = time.perf_counter() - started - data_s
    router, router_record = train_router_on_texts(
        _embedder(model)
    )  # which queries are about time, from the texts
    if dev:  # ... and how often it calls the development splits' queries right
        router_record["dev_accuracy"] = router_accuracy(router, dev)
    measured = evaluate(head, dev, controls=True, recipe=recipe)
    record = {
        "recipe": recipe.to_dict(),
        "backbone": model.name,
        "data": {
            "train": [describe(s) for s in train],
            "dev": [describe(s) for s in dev],
            "composed": [describe(s) for s in composed],
        },
        "data_s": round(data_s, 1),
        "train_s": round(train_s, 1),
        "history": history,
        "dev": measured,
        "router": router_record,
        "selection": selection_record,
    }
    save(head, router, out, record)
    selection.save(out)
    print(json.dumps({"dev": {k: v["within_pair"] for k, v in measured.items()}}, indent=1))
    print(f"rerank head written to {out} ({data_s / 60:.1f} min of data, {train_s / 60:.1f} min of training)")
    return 0


def _refit_selection(args, recipe) -> int:
    """``--selection-only``: the selection query of the head in OUT fitted again by ``recipe`` on the
    backbone's query embeddings of the world's texts (as serving embeds a query), the head untouched."""
    import json
    import time

    from training.selection_query import train_selection

    found = _trained_head(args, "--selection-only")
    if found is None:
        return 2
    out, record_path, model, embed = found
    started = time.perf_counter()
    selection, fitted = train_selection(embed, recipe)
    record = json.loads(record_path.read_text())
    record.setdefault("selection_trained_beside", record.get("selection"))  # a second refit keeps the first's
    record["selection"] = {**fitted, "backbone": model.name, "fit_s": round(time.perf_counter() - started, 1),
                           "refit": "--selection-only: fitted after the head's weights, which were trained "
                           "beside selection_trained_beside"}  # fmt: skip
    selection.save(out)
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({"selection query": record["selection"]}, indent=1))
    print(f"selection query written to {out} (the head's weights untouched)")
    return 0


def _refit_router(args) -> int:
    """``--router-only``: the router of the head in OUT fitted again on the backbone's query embeddings
    of the world's texts (training.router_texts), the head and its selection query untouched."""
    import json
    import time

    from models.router import save_router
    from training.router_texts import train_router_on_texts

    found = _trained_head(args, "--router-only")
    if found is None:
        return 2
    out, record_path, model, embed = found
    started = time.perf_counter()
    router, fitted = train_router_on_texts(embed)
    record = json.loads(record_path.read_text())
    record.setdefault("router_trained_beside", record.get("router"))  # a second refit keeps the first's
    record["router"] = {**fitted, "backbone": model.name, "fit_s": round(time.perf_counter() - started, 1),
                        "refit": "--router-only: fitted on the world's texts after the head's weights, beside "
                        "which router_trained_beside was fitted on the splits' queries"}  # fmt: skip
    save_router(router, out)
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({"router": record["router"]}, indent=1))
    print(f"router written to {out} (the head's weights and selection query untouched)")
    return 0


def _trained_head(args, flag: str):
    """(OUT, its training.json, the backbone, the backbone's query embedding of texts) for a refit of a
    head already trained in OUT; None (and why, printed) where OUT holds none."""
    from pathlib import Path

    out = Path(args.out)
    record_path = out / "training.json"
    if not record_path.is_file():
        print(f"error: {flag}: {out} holds no trained rerank head (no training.json)")
        return None
    _, model = _workdir_and_model(args)
    return out, record_path, model, _embedder(model)


def _embedder(model):
    """The backbone ``model``'s query embedding of texts (texts -> [n, d]), as serving embeds a query."""
    from indexer.assembly import load_model

    backbone = load_model(model).backbone
    return lambda texts: backbone.embed_texts(list(texts))


def _workdir_and_model(args):
    """(--workdir, created: default qaslr-rerank-head under the temp directory; --model, default the
    shipped tiny-world backbone written into it once)."""
    import tempfile
    from pathlib import Path

    work = Path(args.workdir or Path(tempfile.gettempdir()) / "qaslr-rerank-head")
    work.mkdir(parents=True, exist_ok=True)
    return work, Path(args.model) if args.model else _shipped_backbone(work)


def _shipped_backbone(work):
    from training.backbone import current_tiny_world_checkpoint

    return current_tiny_world_checkpoint(work / "tiny-world-checkpoint")


def _index_m(model, seen: int) -> int:
    """M, the evidence budget: the default index's (core.config), at least what the clips hold."""
    from core.config import DEFAULT_MAX_EVIDENCE

    return max(DEFAULT_MAX_EVIDENCE, seen)
