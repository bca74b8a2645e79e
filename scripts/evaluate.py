"""Evaluate traversal policies on a graph set: tables, results JSON, per-question JSONL, budget curves.

    python scripts/evaluate.py data=locomo policy=ppr
    python scripts/evaluate.py data=hotpotqa 'policies=[beta_bfs,dense_topk,ppr,uniform_bfs]'
    python scripts/evaluate.py -m policy=beta_bfs,ppr          # one Hydra job per policy
    python scripts/evaluate.py data=locomo qa=smollm2          # plus answer quality (QA mode)
    python scripts/evaluate.py data=musique_pooled 'policies=[dense_topk,router]' \
        policy=router policy.checkpoint=outputs/train/hotpotqa/fold0/router/best.pt   # HotpotQA -> MuSiQue

``protocol=streaming`` (:mod:`graphmem.streaming`, settings in ``configs/streaming``) feeds each
conversation turn by turn into a fresh live memory and asks each question when its evidence has arrived
(``streaming.ask_at``); with ``streaming.feedback`` (answer, evidence, judge) each question's feedback reaches the
policies that learn after its row is written, and each of them also runs frozen (``<name>_frozen``): Beta BFS
learns its counters, the router learns online (:mod:`rl.walk.online`, wired here). ``results.json`` pairs each
online policy with its frozen copy on every question and on the second half of each stream (group
``second_half``), beside the usual pairs with the reference; ``recall_vs_position.png`` draws recall against the
question's place in its stream::

    python scripts/evaluate.py protocol=streaming graphset=<set built with graph.incremental=true> \
        'policies=[hybrid,beta_bfs,router]' policy=router policy.checkpoint=<best.pt> streaming.feedback=answer

Every table carries paired per-question statistics against ``stats.reference`` (default
``dense_topk``, evaluated too when not listed): mean difference, bootstrap CI and paired t-test
p-value (:mod:`graphmem.eval.stats`).

Writes into the run directory (``out_dir``, default Hydra's), which the run owns
(:mod:`graphmem.store.run_folder`: a live run's folder is refused, an earlier run's files are moved into
``replaced-<run id>/``, ``run.json`` and ``results.json`` carry the run id): ``results.json``,
``results.md``, ``questions_<policy>.jsonl`` and ``budget_sweep.png``; tracks the tables and files through
:mod:`graphmem.tracking` (W&B offline by default). The whole config is checked before any
graph is loaded or built, for every job of a ``-m`` sweep before the first starts
(:mod:`graphmem.config.launch`). In QA mode, a policy whose every answer call failed stops the run with
exit status 3 and no ``results.json``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

import graphmem.config.schemas  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.builders import DataConfig, GraphConfig
from graphmem.config.cli import (
    ConfigError,
    check_out_dir,
    graphset_location,
    load_graphset,
    name_list,
    policy_config,
    restrict_graphs,
    set_threads,
    split_names,
)
from graphmem.config.entry import main, plain, typed
from graphmem.core import Budget
from graphmem.core.errors import InputError, NothingMeasuredError
from graphmem.eval.harness import EvalResult, budget_sweep, evaluate_policy, scaled_budgets, write_jsonl
from graphmem.eval.plots import plot_recall_vs_budget, plot_recall_vs_position, plot_retrieval, sweep_values
from graphmem.eval.provenance import run_provenance
from graphmem.eval.report import full_report, paired_table, results_payload, table_data
from graphmem.eval.stats import PairedComparison, compare_policies
from graphmem.index.embed import make_encoder
from graphmem.policies import POLICIES, TraversalPolicy, make_policy
from graphmem.qa.run import (
    QASettings,
    answered_groups,
    evaluate_qa,
    make_components,
    qa_failure,
    summary_lines,
    write_rows,
)
from graphmem.store.checkpoint import check_policies
from graphmem.store.graphset import GraphSet
from graphmem.store.io import write_json
from graphmem.store.paths import check_name, run_path
from graphmem.store.run_folder import open_run_folder
from graphmem.streaming import (
    PROTOCOLS,
    SECOND_HALF,
    StreamConfig,
    position_curve,
    run_streaming,
    second_half_rows,
    streaming_markdown,
    streaming_payload,
)
from graphmem.tracking import (
    checkpoint_artifact,
    describe_artifact,
    experiment_group,
    log_question_tables,
    make_tracker,
    use_graphset,
)
from graphmem.tracking.artifacts import artifact_name
from rl.common.seeding import seed_everything
from rl.walk.online import OnlineConfig, stream_policies  # test-time learning of the walk, wired here

log = logging.getLogger(__name__)

ARTIFACTS = (
    "results.json",
    "results.md",
    "questions_*.jsonl",
    "qa_*.jsonl",
    "budget_sweep.png",
    "recall_vs_position.png",
    "question_*.png",
    "tracking",
    "wandb",
)
"""What a run writes in its folder: a fresh run moves an earlier run's aside (graphmem.store.run_folder)."""

__all__ = ["ConfigError", "evaluate", "plan_run", "restrict_graphs"]


@dataclass
class Plan:
    """Everything the run needs, validated."""

    data: DataConfig
    graph: GraphConfig
    budget: Budget
    sweep: list[Budget]
    policies: dict[str, TraversalPolicy]
    out_dir: Path
    reference: str | None = None
    policy_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    streaming: StreamConfig | None = None  # protocol=streaming: its settings (None: the batch protocol)


def plan_run(cfg: DictConfig) -> Plan:
    """Check the config and build policies and budgets; raises :class:`ConfigError` with a clear message."""
    try:
        data = DataConfig.from_mapping(plain(cfg.data))
        graph = GraphConfig.from_mapping(plain(cfg.graph))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"invalid data/graph config: {err}") from None
    try:
        budget = typed(cfg.budget, Budget)
        sweep = scaled_budgets(budget, list(cfg.sweep_tokens or []))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"invalid budget: {err}") from None
    if cfg.get("latency", "served") not in ("served", "batch"):
        raise ConfigError(f"latency must be 'served' or 'batch', got {cfg.get('latency')!r}")
    names = name_list(cfg.policies, "policies") if cfg.get("policies") is not None else [cfg.policy.name]
    if isinstance(cfg.get("graphs"), str):
        split_names(cfg.graphs, cfg.get("graphs_part") or "test")  # the split file, read before any work
    if not names:
        raise ConfigError("policies=[] lists no policy: name at least one, or policies=null for the `policy` group")
    stats = cfg.get("stats") or {}
    reference = stats.get("reference")
    n_boot, level = stats.get("n_boot", 10_000), stats.get("level", 0.95)
    if not isinstance(n_boot, int) or isinstance(n_boot, bool) or n_boot < 1 or not 0 < float(level) < 1:
        raise ConfigError(f"stats.n_boot must be a positive integer and stats.level in (0, 1), got {n_boot}, {level}")
    if reference and reference not in names:
        names = [*names, reference]  # the paired statistics need the reference's per-question rows
    if len(set(names)) != len(names):
        raise ConfigError(f"policies listed twice: {names}")
    for n in names:
        check_name("policies", n)
    configs = {n: policy_config(n, cfg.get("policy")) for n in names}
    for n, config in configs.items():
        try:
            POLICIES.resolve(config["_target_"])
        except ValueError as err:
            raise ConfigError(str(err)) from None
    policies = {}
    for n, config in configs.items():
        try:
            if cfg.get("device"):
                config["device"] = cfg.device
            policies[n] = make_policy(config)
        except InputError:
            raise
        except Exception as err:  # noqa: BLE001 - any constructor failure is a config problem here
            raise ConfigError(f"policy {n!r} cannot be constructed from its config: {err}") from None
    out_dir = cfg.get("out_dir")
    if not out_dir:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            raise ConfigError("out_dir is not set and no Hydra run directory exists")
        out_dir = HydraConfig.get().runtime.output_dir
    out_dir = check_out_dir(hydra.utils.to_absolute_path(str(out_dir)))
    streaming = _streaming_config(cfg)
    if streaming is not None:
        sweep = []  # the budget sweep belongs to the batch protocol
    return Plan(data, graph, budget, sweep, policies, out_dir, reference or None, configs, streaming)


def _streaming_config(cfg: DictConfig) -> StreamConfig | None:
    """The checked streaming settings with ``protocol=streaming`` (their online walk's too), else ``None``."""
    protocol = cfg.get("protocol", "batch")
    if protocol not in PROTOCOLS:
        raise ConfigError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if protocol == "batch":
        return None
    if (cfg.get("qa") or {}).get("enabled"):
        raise ConfigError("protocol=streaming does not answer questions: set qa.enabled=false")
    try:
        streaming = typed(cfg.streaming, StreamConfig)
        online = OnlineConfig(**streaming.online)
        for name, overrides in streaming.variants.items():
            check_name("streaming.variants", name)
            OnlineConfig(**{**asdict(online), **dict(overrides)})
    except (TypeError, ValueError) as err:
        raise ConfigError(f"invalid streaming config: {err}") from None
    return streaming


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Run the evaluation described by ``cfg`` in its own run folder and return the ``results.json`` payload."""
    set_threads(cfg)
    plan = plan_run(cfg)
    qa_settings = _qa_settings(cfg)
    config = plain(cfg)
    with open_run_folder(
        plan.out_dir, config, resume=False, artifacts=ARTIFACTS, resume_hint=None, kind="evaluate"
    ) as folder:
        if plan.streaming is not None:
            return _evaluate_streaming(cfg, plan, folder.run_id)
        return _evaluate(cfg, plan, qa_settings, folder.run_id)


def _load(cfg: DictConfig, plan: Plan) -> GraphSet:
    """The run's graph set, restricted to ``graphs``, its policies checked against it."""
    t0 = time.perf_counter()
    gs = load_graphset(cfg, asdict(plan.data), asdict(plan.graph))
    gs = restrict_graphs(gs, cfg.get("graphs"), cfg.get("graphs_part") or "test")
    check_policies(plan.policies, gs)  # trained on this encoder and embedding size; not on these graphs
    log.info("%s", "\n".join(gs.report.lines()))
    log.info("%d graphs, %d questions (%.1fs to load)", len(gs.graphs), len(gs.questions), time.perf_counter() - t0)
    return gs


def _meta(cfg: DictConfig, plan: Plan, gs: GraphSet, run_id: str) -> dict[str, Any]:
    return {
        "dataset": gs.dataset,
        "graphs": len(gs.graphs),
        "questions": len(gs.questions),
        "config_hash": gs.config_hash,
        "graphset": gs.provenance,  # the set's own data file, settings and build time, not the CLI's data.*
        "data": gs.provenance.get("data"),
        "graph": gs.provenance.get("graph"),
        "load_report": gs.report.lines(),
        "seed": int(cfg.seed),
        "run_id": run_id,
        "reference": plan.reference,
        "policy_configs": plan.policy_configs,
    }


def _evaluate(cfg: DictConfig, plan: Plan, qa_settings, run_id: str) -> dict[str, Any]:
    seed_everything(int(cfg.seed))
    out = plan.out_dir
    gs = _load(cfg, plan)
    question = _plot_question(cfg, gs)

    results: list[EvalResult] = []
    sweeps: dict[str, list[EvalResult]] = {}
    qa_results: dict[str, Any] = {}
    qa_shared: dict[str, Any] = {}
    for name, policy in plan.policies.items():
        main_result = evaluate_policy(
            policy, gs, plan.budget, progress=cfg.progress, serve_latency=cfg.get("latency", "served") == "served"
        )
        results.append(main_result)
        # a sweep level equal to the run's budget reuses its result instead of retrieving again
        sweeps[name] = [
            main_result if b == plan.budget else budget_sweep(policy, gs, [b], progress=cfg.progress)[0]
            for b in plan.sweep
        ]
        write_jsonl(results[-1].rows, run_path(out, f"questions_{name}.jsonl"))
        if qa_settings is not None:
            qa_results[name] = _run_qa(qa_settings, gs, main_result, out, cfg.progress, qa_shared)
            failed = _qa_failure(qa_results[name])
            if failed:  # the endpoint is not answering: stop, with no results.json to read as a result
                raise NothingMeasuredError(f"QA of {name}: {failed}; no results.json written")

    paired = _paired(cfg, plan, results)
    report = full_report(results, paired) + (_qa_report(qa_results) if qa_results else "")
    log.info("\n%s", report)
    (out / "results.md").write_text(report, encoding="utf-8")
    payload = results_payload(results, sweeps, _meta(cfg, plan, gs, run_id), paired)
    if qa_results:
        payload["qa"] = {p: {"summary": r.summary, "info": r.info} for p, r in qa_results.items()}
    rows = {r.policy: len(r.rows) for r in results}  # data file, graph set and config hashes; finished with this file
    payload["provenance"] = run_provenance(plain(cfg), gs, rows)
    if plan.sweep:
        panels = {"evidence recall": sweep_values(sweeps), "all-evidence hit": sweep_values(sweeps, "all_evidence_hit")}
        plot_recall_vs_budget(panels, out / "budget_sweep.png", title=f"{gs.dataset}: recall vs token budget")
    if question is not None:
        _draw_question(question, gs, results, out, cfg.get("plot_policies"))
    write_json(out / "results.json", payload, indent=2)  # last of the run's files: its presence marks it finished
    _track(cfg, plan, gs, results, sweeps, out, qa_results, paired)
    log.info("results written to %s", out)
    return payload


def _evaluate_streaming(cfg: DictConfig, plan: Plan, run_id: str) -> dict[str, Any]:
    """The streaming protocol (module docstring): rows, paired statistics (with the reference, and each online
    policy with its frozen copy on all questions and on the second half of each stream), the learners' cost, the
    memories' growth and recall against the place in the stream."""
    seed_everything(int(cfg.seed))
    out, sc = plan.out_dir, plan.streaming
    gs = _load(cfg, plan)
    online = OnlineConfig(**sc.online)
    stream, pairs = stream_policies(plan.policies, sc.feedback, online, plan.budget, sc.variants)
    graph_settings = gs.provenance.get("graph") or asdict(plan.graph)
    if not graph_settings.get("incremental"):
        log.warning("the set was not built with graph.incremental=true: the memories' graphs differ from its graphs")
    encoder = make_encoder(graph_settings.get("encoder", plan.graph.encoder))
    run = run_streaming(
        gs, stream, plan.budget, sc, encoder=encoder, graph_config=graph_settings, progress=cfg.progress
    )
    for r in run.results:
        write_jsonl(r.rows, run_path(out, f"questions_{r.policy}.jsonl"))
    paired = _paired(cfg, plan, run.results) + _online_pairs(cfg, run.results, pairs)
    report = full_report(run.results, paired) + streaming_markdown(run, pairs)
    log.info("\n%s", report)
    (out / "results.md").write_text(report, encoding="utf-8")
    payload = results_payload(run.results, {}, _meta(cfg, plan, gs, run_id), paired)
    payload["streaming"] = streaming_payload(run, sc, pairs, online)
    rows = {r.policy: len(r.rows) for r in run.results}
    payload["provenance"] = run_provenance(plain(cfg), gs, rows)
    curves = {r.policy: position_curve(r.rows) for r in run.results}
    plot_recall_vs_position(curves, out / "recall_vs_position.png", title=f"{gs.dataset}: recall by place in stream")
    write_json(out / "results.json", payload, indent=2)  # last of the run's files: its presence marks it finished
    _track(cfg, plan, gs, run.results, {}, out, None, paired)
    log.info("results written to %s", out)
    return payload


def _online_pairs(cfg: DictConfig, results: list[EvalResult], pairs: dict[str, str]) -> list[PairedComparison]:
    """Each online policy against its frozen copy, on every question and on the second half of each stream."""
    stats, rows = cfg.get("stats") or {}, {r.policy: r.rows for r in results}
    kwargs = dict(n_boot=int(stats.get("n_boot", 10_000)), level=float(stats.get("level", 0.95)), seed=int(cfg.seed))
    out: list[PairedComparison] = []
    for online, frozen in pairs.items():
        both = {online: rows[online], frozen: rows[frozen]}
        out += compare_policies(both, frozen, **kwargs)
        late = {k: second_half_rows(v) for k, v in both.items()}
        out += compare_policies(late, frozen, group=SECOND_HALF, **kwargs)
    return out


def _plot_question(cfg: DictConfig, gs: GraphSet):
    """The question ``plot_question`` names (checked before any retrieval), or ``None``."""
    qid = cfg.get("plot_question")
    if qid is None:
        return None
    found = [q for q in gs.questions if q.qid == str(qid)]
    if not found:
        raise ConfigError(f"plot_question {qid!r} is not a question of the graph set (e.g. {gs.questions[0].qid!r})")
    evaluated = name_list(cfg.policies, "policies") if cfg.policies else [cfg.policy.name]
    unknown = sorted(set(cfg.get("plot_policies") or []) - set(evaluated))
    if unknown:
        raise ConfigError(f"plot_policies {unknown} are not evaluated in this run (policies={cfg.policies})")
    return found[0]


def _draw_question(question, gs: GraphSet, results: list[EvalResult], out: Path, policies=None) -> Path:
    """``question_<qid>.png``: what each evaluated policy (or those in ``policies``) retrieved for the
    question, side by side."""
    shown = [r for r in results if not policies or r.policy in policies]
    traces = {r.policy: next(row["trace"] for row in r.rows if row["qid"] == question.qid) for r in shown}
    path = out / f"question_{artifact_name(question.qid)}.png"
    return plot_retrieval(gs.graphs[question.graph], question.text, list(question.evidence), traces, path)


def _track(
    cfg: DictConfig,
    plan: Plan,
    gs: GraphSet,
    results: list[EvalResult],
    sweeps: dict[str, list[EvalResult]],
    out: Path,
    qa_results: dict[str, Any] | None = None,
    paired: list[PairedComparison] | None = None,
) -> None:
    """One ``evaluate`` run: inputs (graph set, checkpoints), test figures in the summary, per-question
    and summary tables, and every output file as one result artifact named after the run."""
    name = f"evaluate-{plan.data.name}-{'+'.join(plan.policies)}"
    group = experiment_group("evaluate", gs.dataset)
    with make_tracker(cfg.logger, run_config=cfg, out_dir=out, name=name, job_type="evaluate", group=group) as tracker:
        use_graphset(tracker, graphset_location(cfg))
        for kwargs in plan.policy_configs.values():
            if kwargs.get("checkpoint") and Path(kwargs["checkpoint"]).is_file():
                tracker.use_artifact(checkpoint_artifact(kwargs["checkpoint"]))
        columns, rows = [], []
        for r in results:
            columns, policy_rows = table_data(r)
            rows += policy_rows
            tracker.update_summary(
                {
                    f"test/{r.policy}/{group}/{k}": v
                    for group, s in r.summary.items()
                    for k, v in s.items()
                    if isinstance(v, (int, float))
                }
            )
        log_question_tables(tracker, results)
        tracker.log_table("summary", columns, rows)
        if paired:
            tracker.log_table("paired_vs_reference", *paired_table(paired))
            tracker.update_summary(
                {f"paired/{c.policy}/{c.metric}/{k}": getattr(c, k) for c in paired for k in PAIRED_SCALARS}
            )
        sweep_rows = [
            [
                policy,
                p.budget.max_tokens,
                p.budget.max_nodes,
                p.overall["evidence_recall"],
                p.overall["all_evidence_hit"],
                p.overall["loaded_tokens"],
            ]
            for policy, points in sweeps.items()
            for p in points
        ]
        tracker.log_table(
            "budget_sweep",
            ["policy", "max_tokens", "max_nodes", "evidence_recall", "all_evidence_hit", "loaded_tokens"],
            sweep_rows,
        )
        if qa_results:
            _track_qa(tracker, qa_results)
        files = [
            p.name for p in sorted(out.iterdir()) if p.is_file() and p.suffix in (".json", ".md", ".jsonl", ".png")
        ]
        tracker.log_artifact(describe_artifact(out, "results", tracker.run_artifact_name("results"), files=files))


PAIRED_SCALARS = ("n", "mean_diff", "ci_low", "ci_high", "p_value")


def _paired(cfg: DictConfig, plan: Plan, results: list[EvalResult]) -> list[PairedComparison]:
    """Each policy against the reference, question by question (nothing when no reference is set)."""
    if plan.reference is None:
        return []
    stats = cfg.get("stats") or {}
    return compare_policies(
        {r.policy: r.rows for r in results},
        plan.reference,
        n_boot=int(stats.get("n_boot", 10_000)),
        level=float(stats.get("level", 0.95)),
        seed=int(cfg.seed),
    )


# ---------------------------------------------------------------------------- QA mode (qa.enabled)
def _qa_settings(cfg: DictConfig):
    """Checked QA settings when ``qa.enabled`` is true, else ``None`` (before any graph is loaded)."""
    qa = cfg.get("qa")
    if qa is None or not qa.get("enabled", False):
        return None

    try:
        return QASettings.from_mapping(OmegaConf.to_container(qa, resolve=True))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"invalid qa config: {err}") from None


def _run_qa(settings, gs: GraphSet, result: EvalResult, out: Path, progress: bool, shared: dict[str, Any]):
    """Answer + score a seeded sample from ``result``'s loaded nodes; rows to ``qa_<policy>.jsonl``."""
    components = make_components(settings, intents=shared.get("intents"))  # fresh clients per policy
    shared["intents"] = components[2]  # the intent source (and its encoder) is built once per run
    loaded = {row["qid"]: row["loaded"] for row in result.rows}
    qa = evaluate_qa(settings, gs, loaded, policy=result.policy, components=components, progress=progress)
    write_rows(qa, run_path(out, f"qa_{check_name('policies', result.policy)}.jsonl"))
    log.info("%s", "\n".join(summary_lines(qa)))
    return qa


def _qa_failure(result) -> str | None:
    return qa_failure(result)


def _qa_report(qa_results: dict[str, Any]) -> str:
    lines = [
        "",
        "## Answer quality (QA)",
        "",
        "F1, EM, judge, abstain and latency are means over answered questions; `failed` counts the questions whose "
        "answer call failed (not scored).",
        "",
        "| policy | group | n | answered | failed | F1 | EM | judge | abstain | tokens | cost $ | latency s/q |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    columns = ("n", "answered", "failed", "f1", "em", "judge", "abstain", "tokens", "cost", "latency")
    for policy, r in qa_results.items():
        for group, c in answered_groups(r):
            lines.append(f"| {policy} | {group} | " + " | ".join(c[k] for k in columns) + " |")
    models = {
        (r.info.get("answer_model"), r.info.get("judge_model"), r.info.get("self_judged")) for r in qa_results.values()
    }
    lines += [""] + [f"answer model: {a}; judge model: {j}{' (self-judged)' if sj else ''}" for a, j, sj in models]
    return "\n".join(lines) + "\n"


def _track_qa(tracker, qa_results: dict[str, Any]) -> None:
    columns = [
        "qid",
        "graph",
        "category",
        "question",
        "gold_answer",
        "answer",
        "answer_failed",
        "intent",
        "rule",
        "f1",
        "em",
        "judge",
        "tokens",
        "cost_usd",
        "latency_s",
    ]
    for policy, r in qa_results.items():
        tracker.update_summary(
            {
                f"test/{policy}/qa/{group}/{k}": v
                for group, s in r.summary.items()
                for k, v in s.items()
                if isinstance(v, (int, float))
            }
        )
        tracker.log_table(
            f"qa/{policy}",
            columns,
            [
                [
                    x["qid"],
                    x["graph"],
                    x["category_name"],
                    x["question"],
                    x["gold_answer"],
                    x["answer"]["text"],
                    x["answer_failed"],
                    x["answer"]["intent"],
                    x["score"]["rule"],
                    x["f1"],
                    x["em"],
                    x["judge"],
                    x["tokens"],
                    x["cost_usd"],
                    x["latency_s"],
                ]
                for x in r.rows
            ],
        )


if __name__ == "__main__":
    main("evaluate", evaluate, lambda cfg: plan_run(cfg).out_dir, errors=(ConfigError,))
