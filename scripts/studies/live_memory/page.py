"""``docs/memory.md``: the live memory's guide (``page.md`` beside this file) and what was measured of it, from
``docs/results/memory_equivalence.json`` (``run.py``), ``memory_kills.json``
(``scripts/reliability/memory_kills.py``) and ``memory_scale.json`` (``scripts/benchmarks/bench_memory.py``);
a section whose results file is absent is left out."""

from __future__ import annotations

from pathlib import Path

from docgen.sources import fill, load_results

PAGE = "memory"
TEMPLATE = str(Path(__file__).with_name("page"))
"""the page's prose: ``page.md`` beside this file (:func:`~docgen.sources.fill` takes its path)"""


def _pair(c: dict | None) -> str:
    if not c:
        return "—"
    return f"{c['mean_diff']:+.4f} [{c['ci_low']:+.4f}, {c['ci_high']:+.4f}], p {c['p_value']:.2g}, n {c['n']}"


def _equivalence(payload: dict) -> list[str]:
    lines = [
        fill(TEMPLATE, "equivalence"),
        "",
        "| conversation | turns | edges | `given` equal | `encoded`: edges only in batch / only in memory "
        "| largest feature / embedding difference | turns/s |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for r in payload["conversations"]:
        lines.append(
            f"| {r['graph']} | {r['turns']} | {r['edges']:,} | {'yes' if r['given_equal'] else 'NO'} | "
            f"{r['encoded_edges_only_in_batch']} / {r['encoded_edges_only_in_memory']} | "
            f"{r['encoded_max_feature_diff']:.1e} / {r['encoded_max_embedding_diff']:.1e} | "
            f"{r['encoded_turns_per_s']:.0f} |"
        )
    lines += ["", f"Made by `{payload['command']}` ({payload['wall_s'] / 60:.1f} min)."]
    if payload["walks"]:
        lines += [
            "",
            fill(TEMPLATE, "walks"),
            "",
            "| checkpoint | questions | identical: given / encoded / batch vs set | given − batch | encoded − batch "
            "| incremental rules − batch rules |",
            "|---|---:|---|---|---|---|",
        ]
        for w in payload["walks"]:
            n = w["questions"]
            lines.append(
                f"| `{w['checkpoint']}` | {n} | {w['identical_given_vs_batch']} / {w['identical_encoded_vs_batch']}"
                f" / {w['identical_batch_vs_set']} | {_pair(w['paired_given_vs_batch'])} | "
                f"{_pair(w['paired_encoded_vs_batch'])} | {_pair(w['paired_batch_vs_set'])} |"
            )
    return lines


def _crash(r: dict) -> list[str]:
    return [
        fill(
            TEMPLATE,
            "crash",
            command=r["command"],
            kills=r["kills"],
            stored=r["stored_adds"],
            reported=r["reported_adds"],
            unreported=r["committed_not_reported"],
            problems=len(r["integrity_problems"]),
            order="yes" if r["in_arrival_order"] else "NO",
            equal="yes" if r["equal_to_an_uncrashed_memory"] else "NO",
            same="yes" if r["same_ranked_lists"] else "NO",
        )
    ]


def _ms(summary: dict) -> str:
    return f"{summary['p50_ms']:.2f} ({summary['cpu']['p50_ms']:.2f})"


def _scale(r: dict) -> list[str]:
    load = ", ".join(f"{x:.1f}" for x in r["load_average_at_start"])
    lines = [
        fill(TEMPLATE, "scale", command=r["command"], load=load, encode_ms=f"{r['encode_ms']['p50_ms']:.3f}"),
        "",
        "| records | add ms | ×10³ | router ms | ×10³ | hybrid ms | ×10³ | first retrieve s (router) | open s "
        "| first add after open s | fill records/s | database MB | peak RSS MB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in r["sizes"]:
        lines.append(
            f"| {s['records']:,} | {_ms(s['add'])} | {s['add_p50_over_first']:.2f} | {_ms(s['retrieve_router'])} | "
            f"{s['retrieve_router_p50_over_first']:.2f} | {_ms(s['retrieve_hybrid'])} | "
            f"{s['retrieve_hybrid_p50_over_first']:.2f} | {s['first_retrieve_s_router']:.2f} | {s['open_s']:.2f} | "
            f"{s['first_add_after_open_s']:.2f} | {s['fill_records_per_s']:.0f} | {s['bytes'] / 2**20:,.0f} | "
            f"{s['peak_rss_mb']:,.0f} |"
        )
    lines += ["", _scale_goals(r["sizes"])]
    if r.get("ingest"):
        i = r["ingest"]
        lines += [
            "",
            f"Ingest with the real encoder ({i['encoder']}): {i['turns']:,} LoCoMo turns in transactions "
            f"of 64, {i['turns_per_s']:.0f} turns/s.",
        ]
    return lines


GOAL_RECORDS = 1_000_000
"""the largest memory the scale goals name (add and retrieve p50 within 2x of 10^3 records)"""


def _met(ratio: float, goal: float = 2.0) -> str:
    return "met" if ratio <= goal else f"missed by {ratio / goal:.2f}×"


def _scale_goals(sizes: list[dict]) -> str:
    """The scale goals (add p50 within 2× of the first size at every size, the walk's retrieve p50 at the largest
    within 2×) met or missed, and the open times of 10⁵ records and more."""
    worst = max(sizes, key=lambda s: s["add_p50_over_first"])
    add, retrieve = worst["add_p50_over_first"], sizes[-1]["retrieve_router_p50_over_first"]
    opens = [f"{s['open_s']:.2f} s at {s['records']:,}" for s in sizes if s["records"] >= 100_000]
    return fill(
        TEMPLATE,
        "scale_goals",
        first=f"{sizes[0]['records']:,}",
        last=f"{sizes[-1]['records']:,}",
        add=f"largest {add:.2f}× at {worst['records']:,}: {_met(add)}",
        retrieve=f"{retrieve:.2f}×: {_met(retrieve)}",
        opens="; ".join(opens) or "no size of 100,000 records or more",
        short=(
            f" The goal's largest size, {GOAL_RECORDS:,} records, was not grown in this run."
            if sizes[-1]["records"] < GOAL_RECORDS
            else ""
        ),
    )


def render(results_dir: Path) -> str:
    out = [fill(TEMPLATE, "intro")]
    for name, section in (
        ("memory_equivalence.json", _equivalence),
        ("memory_kills.json", _crash),
        ("memory_scale.json", _scale),
    ):
        payload = load_results(results_dir, name)
        if payload is not None:
            out += ["", *section(payload)]
    return "\n".join(out) + "\n"
