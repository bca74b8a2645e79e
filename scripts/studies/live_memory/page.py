"""``docs/memory.md``: the live memory's guide (``page.md`` beside this file) and what was measured of it, from
``docs/results/memory_equivalence.json`` (``run.py``), ``memory_kills.json``
(``scripts/reliability/memory_kills.py``), ``memory_scale.json`` (``scripts/benchmarks/bench_memory.py``) and
every ``memory_reopen*.json`` (``scripts/benchmarks/bench_reopen.py``); a section whose results file is absent is
left out."""

from __future__ import annotations

from pathlib import Path

from docgen.sources import after_add_cpu_s, fill, load_results, measuring_processes

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


def _ms(summary: dict | None) -> str:
    return "—" if summary is None else f"{summary['p50_ms']:.2f} ({summary['cpu']['p50_ms']:.2f})"


def _num(value: float | None, spec: str) -> str:
    """``value`` formatted, or a dash for a figure the run did not measure."""
    return "—" if value is None else format(value, spec)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def _lead(r: dict, block: str, **values: str) -> list[str]:
    """A section's lead paragraph with the run's command and load average at the start, and a blank line."""
    load = ", ".join(f"{x:.1f}" for x in r["load_average_at_start"])
    return [fill(TEMPLATE, block, command=r["command"], load=load, **values), ""]


def _scale(r: dict) -> list[str]:
    header = "records|add ms|×10³|router ms|×10³|router, gathered ms|×10³|hybrid ms|×10³|forget ms".split("|")
    header += ["fill records/s", "database MB"]
    rows = [
        [
            f"{s['records']:,}" if "records" in s else "—",
            _ms(s.get("add")),
            _num(s.get("add_p50_over_first"), ".2f"),
            _ms(s.get("retrieve_router")),
            _num(s.get("retrieve_router_p50_over_first"), ".2f"),
            _ms(s.get("retrieve_router_gathered")),
            _num(s.get("retrieve_router_gathered_p50_over_first"), ".2f"),
            _ms(s.get("retrieve_hybrid")),
            _num(s.get("retrieve_hybrid_p50_over_first"), ".2f"),
            _ms(s.get("forget")),
            f"{s['fill_records_per_s']:.0f}",
            _num(_mb(s.get("bytes")), ",.0f"),
        ]
        for s in r["sizes"]
    ]
    lines = _lead(r, "scale", encode_ms=f"{r['encode_ms']['p50_ms']:.3f}") + _table(header, rows) + _runs(r)
    reused = [s for s in r["sizes"] if s.get("reused")]
    if reused:
        by: dict[str, list[str]] = {}
        for s in reused:
            by.setdefault(s["grown_by"], []).append(f"{s['records']:,}")
        grown_by = "; ".join(f"`{command}`: {', '.join(sizes)} records" for command, sizes in by.items())
        moved = [f"{s['records']:,}" for s in reused if s.get("hnsw_file_from")]
        named = ", ".join(moved[:-1]) + (" and " if len(moved) > 1 else "") + moved[-1] if moved else ""
        converted = (
            f"The HNSW index files of the kept memories measured at {named} records were written from the "
            "neighbour index files their growing runs saved (the same FAISS index and row map): the code that grew "
            "them kept the index of the semantic-neighbour search apart from the dense entry index."
            if moved
            else ""
        )
        if any(s.get("upgraded") for s in reused):
            converted += (
                " They were grown by the code of schema 1; before this run a read-write open rebuilt their edges in the"
                " schema-2 form and `VACUUM` compacted each file: the same records and edges, in the same order."
            )
        lines += ["", fill(TEMPLATE, "scale_reused", sizes=len(reused), grown_by=grown_by, converted=converted)]
    lines += ["", fill(TEMPLATE, "scale_costs"), "", *_costs(r["sizes"]), *_reads(r["sizes"])]
    lines += ["", _scale_goals(r), *_gathered(r)]
    for s in [s for s in r["sizes"] if "stopped" in s]:
        lines += [
            "",
            fill(TEMPLATE, "scale_stopped", records=f"{s['records']:,}", step=s["last_step"], why=s["stopped"]),
        ]
    if r.get("ingest"):
        i = r["ingest"]
        lines += [
            "",
            f"Ingest with the real encoder ({i['encoder']}): {i['turns']:,} LoCoMo turns in transactions "
            f"of 64, {i['turns_per_s']:.0f} turns/s.",
        ]
    return lines


def _runs(r: dict) -> list[str]:
    """Each measuring process's wall p50s and open time, where a size was measured by more than one (the table
    above holds their medians)."""
    measured = [s for s in r["sizes"] if s.get("runs")]
    if not measured:
        return []
    keys = ("add", "retrieve_router", "retrieve_router_gathered", "retrieve_hybrid")
    header = ["records", "add ms", "router ms", "router, gathered ms", "hybrid ms", "open s"]
    rows = [
        [f"{s['records']:,}"] + [" / ".join(_num(run.get(k), ".2f") for run in s["runs"]) for k in (*keys, "open_s")]
        for s in measured
    ]
    return ["", fill(TEMPLATE, "scale_runs", repeats=str(measuring_processes(r))), "", *_table(header, rows)]


def _costs(sizes: list[dict]) -> list[str]:
    """What opening, the first calls and a write cost at each size, and the measuring process's resident memory."""
    header = [
        "records",
        "open s",
        "first add after open s",
        "first retrieve s (hybrid, router)",
        "retrieval after an add s (CPU p50 / mean)",
        "RSS after open MB",
        "RSS after hybrid's retrievals MB",
        "RSS after the router's retrievals MB",
        "peak RSS MB",
    ]
    rows = [
        [
            f"{s['records']:,}",
            f"{s['open_s']:.2f}",
            f"{s['first_add_after_open_s']:.2f}",
            f"{_num(s.get('first_retrieve_s_hybrid'), '.2f')}, {_num(s.get('first_retrieve_s_router'), '.2f')}",
            f"{_num(after_add_cpu_s(s), '.2f')} / {_num(after_add_cpu_s(s, 'mean'), '.2f')}",
            f"{s['rss_after_open_mb']:,.0f}",
            _num(s.get("rss_after_retrieve_hybrid_mb"), ",.0f"),
            _num(s.get("rss_after_retrieve_router_mb"), ",.0f"),
            f"{s['peak_rss_mb']:,.0f}",
        ]
        for s in sizes
        if "open_s" in s
    ]
    return _table(header, rows)


def _reads(sizes: list[dict]) -> list[str]:
    """What the walk's read grows with: the graph's out-degrees and the candidate edges it scored per query."""
    sizes = [s for s in sizes if "out_degree" in s and "edges_considered_router" in s]
    if not sizes:
        return []
    header = ["records", "out-degree mean", "p99", "max", "edges scored per query", "walk p50 ms", "µs per edge"]
    rows = [
        [
            f"{s['records']:,}",
            f"{s['out_degree']['mean']:.1f}",
            f"{s['out_degree']['p99']:.0f}",
            f"{s['out_degree']['max']:,}",
            f"{s['edges_considered_router']:.0f}",
            f"{s['retrieve_router']['p50_ms']:.2f}",
            f"{1e3 * s['retrieve_router']['p50_ms'] / max(s['edges_considered_router'], 1):.1f}",
        ]
        for s in sizes
    ]
    return ["", fill(TEMPLATE, "scale_reads"), "", *_table(header, rows)]


GOAL_RECORDS = 1_000_000
"""the largest memory the scale goals name (add and retrieve p50 within 2x of 10^3 records)"""


def _met(ratio: float | None, goal: float = 2.0) -> str:
    if ratio is None:
        return "not measured"
    return f"{ratio:.2f}×: " + ("met" if ratio <= goal else f"missed by {ratio / goal:.2f}×")


def _pairings(first: dict, row: dict, key: str) -> str:
    """The ratios that one measuring process of ``row``'s size over one of the first size's give (every pairing:
    how far the machine's noise moves the ratio of medians), where each size was measured more than once."""
    ours, theirs = [run.get(key) for run in row.get("runs", [])], [run.get(key) for run in first.get("runs", [])]
    ratios = [a / b for a in ours for b in theirs if a is not None and b]
    if len(ours) < 2 or not ratios:
        return ""
    return f"; one process over one, {min(ratios):.2f}× to {max(ratios):.2f}×"


def _scale_goals(r: dict) -> str:
    """The scale goals (add p50 within 2× of the first size at every size, the walk's retrieve p50 at the largest
    within 2×) met or missed, and the open times of 10⁵ records and more."""
    sizes = r["sizes"]
    measured = [s for s in sizes if "add_p50_over_first" in s]
    worst = max(measured, key=lambda s: s["add_p50_over_first"])
    last = sizes[-1]
    opens = [f"{s['open_s']:.2f} s at {s['records']:,}" for s in sizes if s.get("records", 0) >= 100_000]
    return fill(
        TEMPLATE,
        "scale_goals",
        first=f"{sizes[0]['records']:,}",
        medians=" (of the medians of its processes)" if measuring_processes(r) > 1 else "",
        last=f"{last.get('records', 0):,}",
        add=f"largest at {worst['records']:,}, {_met(worst['add_p50_over_first'])}{_pairings(sizes[0], worst, 'add')}",
        retrieve=_met(last.get("retrieve_router_p50_over_first")) + _pairings(sizes[0], last, "retrieve_router"),
        opens="; ".join(opens) or "no size of 100,000 records or more",
        short=(
            f" The goal's largest size, {GOAL_RECORDS:,} records, was not grown in this run."
            if last.get("records", 0) < GOAL_RECORDS
            else ""
        ),
    )


def _gathered(r: dict) -> list[str]:
    """The walk's ratio by one path: its node columns from gathered rows at every size (when measured)."""
    first, last = r["sizes"][0], r["sizes"][-1]
    if "retrieve_router_gathered_p50_over_first" not in last:
        return []
    return [
        "",
        fill(
            TEMPLATE,
            "scale_gathered",
            dense=f"{r['dense_row_records']:,}",
            first=f"{first['records']:,}",
            last=f"{last['records']:,}",
            gathered=f"{first['retrieve_router_gathered']['p50_ms']:.2f}",
            gathered_last=f"{last['retrieve_router_gathered']['p50_ms']:.2f}",
            ratio=f"{last['retrieve_router_gathered_p50_over_first']:.2f}",
        ),
    ]


def _reopen(runs: list[dict]) -> list[str]:
    """Reopening a memory each way (the state and indexes read and built, or loaded), one table per run."""
    out = [fill(TEMPLATE, "reopen").rstrip(), ""]
    for r in runs:
        ways = list(r["rounds"])
        how = f"{r['records']:,} records, " + (
            f"a copy of `{r['memory']}`" if r.get("memory") else "grown by the benchmark"
        )
        ratio = r.get("open_s_rows_over_loaded")
        what = how + (f"; the open from the saved state {ratio:.1f}× faster than from the rows." if ratio else ".")
        walk = f"{ways[0]}_first_walk_s_median" in r
        rows = [
            [
                way,
                str(len(r["rounds"][way])),
                f"{r[f'{way}_open_s_median']:.2f}",
                f"{r[f'{way}_first_retrieve_s_median']:.3f}",
                *([f"{r[f'{way}_first_walk_s_median']:.2f}"] if walk else []),
                f"{r[f'{way}_first_add_s_median']:.3f}",
                f"{r[f'{way}_close_s_median']:.2f}",
            ]
            for way in ways
        ]
        header = ["way", "rounds", "open s", "first retrieval s (hybrid)"]
        header += ["then the walk's first s"] if walk else []
        out += _lead(r, "reopen_run", what=what)
        out += _table([*header, "first add s", "close s"], rows) + [""]
    return out[:-1]


def _cpu_p50(row: dict, key: str) -> float | None:
    return row.get(key, {}).get("cpu", {}).get("p50_ms")


def _write_read(now: dict, before: dict) -> list[str]:
    """The same sizes measured by the code before (``memory_scale_before.json``) and in the run above: steady-state
    adds, forgets and retrievals, the database's size, the open and the resident memory."""
    was = {s["records"] // 1000: s for s in before["sizes"] if "records" in s}
    rows = []
    for s in (s for s in now["sizes"] if "records" in s):
        old = was.get(s["records"] // 1000, {})
        pairs = [(_cpu_p50(old, key), _cpu_p50(s, key), ".2f") for key in ("add", "forget")]
        pairs += [(_cpu_p50(old, key), _cpu_p50(s, key), ".2f") for key in ("retrieve_router", "retrieve_hybrid")]
        pairs.append((_mb(old.get("bytes")), _mb(s.get("bytes")), ",.0f"))
        pairs.append((old.get("open_s"), s.get("open_s"), ".2f"))
        pairs.append((old.get("peak_rss_mb"), s.get("peak_rss_mb"), ",.0f"))
        rows.append([f"{s['records']:,}", *(_num(v, spec) for a, b, spec in pairs for v in (a, b))])
    header = ["records", "add ms, before", "now", "forget ms, before", "now", "router ms, before", "now"]
    header += ["hybrid ms, before", "now", "database MB, before", "now", "open s, before", "now"]
    header += ["peak RSS MB, before", "now"]
    lines = [fill(TEMPLATE, "write_read", before=before["command"]), "", *_table(header, rows)]
    runs = measuring_processes(now)
    now_is = f"the median of the run's {runs} processes" if runs > 1 else "one process per size"
    return lines + ["", fill(TEMPLATE, "write_read_spread", now=now_is)]


def _mb(n: int | None) -> float | None:
    return None if n is None else n / 2**20


def render(results_dir: Path) -> str:
    out = [fill(TEMPLATE, "intro")]
    held = {name: load_results(results_dir, f"memory_{name}.json") for name in ("equivalence", "kills", "scale")}
    for name, section in (("equivalence", _equivalence), ("kills", _crash), ("scale", _scale)):
        out += ["", *section(held[name])] if held[name] is not None else []
    before = load_results(results_dir, "memory_scale_before.json")
    out += ["", *_write_read(held["scale"], before)] if held["scale"] is not None and before is not None else []
    # every reopening run: the benchmark's own and those of a kept memory
    reopens = [load_results(results_dir, p.name) for p in sorted(Path(results_dir).glob("memory_reopen*.json"))]
    out += ["", *_reopen(reopens)] if reopens else []
    return "\n".join(out) + "\n"
