"""docs/results.md's section on the first look on a GPU (docs/bench/first_look_gpu.json)."""

from __future__ import annotations


def first_look_gpu_section(data: dict | None) -> list[str]:
    if not data:
        return []
    out = [
        "## The first look on a GPU",
        "",
        data["what"],
        "",
        f"`{data['commands']['in_process']}` (fresh engine per query) and `{data['commands']['server']}` "
        "(fresh `qaslr serve` per query); p50 ms.",
        "",
        "| machine | how | cold | warm | stage 1 | stage 1, first call | cold / warm | Hit@1 | R1@0.7 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [("H200 (before)", k, v) for k, v in data["gpu_before"].items()]
    rows += [("2-core CPU", k, v) for k, v in data["cpu_same_corpus"].items()]
    for machine, how, r in rows:
        out.append(
            f"| {machine} | {how.replace('_', ' ')} | {r['cold_p50_ms']:.1f} | {r['warm_p50_ms']:.1f} | "
            f"{r['stage1_p50_ms']:.1f} | {r['stage1_first_p50_ms']:.1f} | {r['cold_over_warm']:.2f} | "
            f"{r['hit1']:.2f} | {r['r1@0.7']:.2f} |"
        )
    out += [
        "",
        f"Where a cold query's time went on the GPU ({data['commands']['diagnosis']}), ms:",
        "",
        "| prompt padding | words | first call | again | again, on a new thread |",
        "|---|---|---|---|---|",
    ]
    for pad, calls in data["gpu_first_call_diagnosis_ms"].items():
        for c in calls:
            out.append(
                f"| {'none' if pad.endswith('_0') else 'to a multiple of ' + pad.rsplit('_', 1)[1]} | {c['words']} | {c['first_call_ms']:.1f} | {c['again_ms']:.1f} | "
                f"{c['new_thread_ms']:.1f} |"
            )
    env = data.get("environment", {})
    out += [
        "",
        "The first row is the process's first text call; the padded rows ran after the others in the same process. "
        "Environment: "
        f"{env.get('gpu')}, torch {env.get('packages', {}).get('torch')}, transformers "
        f"{env.get('packages', {}).get('transformers')}, {env.get('cpu_count')} CPUs.",
        "",
    ]
    return out
