"""The shapes-world renders the time head trains on and is measured on, as data.

`qaslr train-time-head`'s defaults and `benchmarks/bench_time_head.py` both read them here, so the
shipped head, its Table 6 and its early exit are measured on the same renders. Nothing heavy is
imported: the CLI's parser reads this module.
"""

TRAIN_SEEDS = (1,)  # renders to train on
HELD_OUT_SEED = 2  # the render every number is measured on
GATE_SEEDS = (3, 4)  # renders of the held-out shape that only fit the early-exit gates (bench_time_head)

# keyword arguments of training.time_head.load_split
TRAIN_RENDER = {
    "order_pairs": 24, "count_pairs": 24, "count3_pairs": 12, "singles": 12, "min_s": 40.0, "max_s": 150.0,
}  # fmt: skip
HELD_OUT_RENDER = {
    "order_pairs": 12, "count_pairs": 12, "count3_pairs": 6, "singles": 8, "min_s": 60.0, "max_s": 240.0,
}  # fmt: skip
