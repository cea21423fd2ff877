"""The choices study's Markdown report, from the tables ``tables.py`` stored (see ``choices.py``).

Every choice is made here, on dev rows of a table, by argmax and by
:func:`dotcat.evaluation.choice.choose`; test rows are only read for what was chosen.
"""

from __future__ import annotations

import itertools
import math
import re
import subprocess
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tables

import common
from dotcat.data.splits import DEV_SEED, split_dev
from dotcat.evaluation.choice import argmax, choose
from dotcat.evaluation.significance import ttest_pvalue
from dotcat.search.calibrate import PRIOR as CALIBRATION_PRIOR
from dotcat.search.fusion import PRIOR as FUSION_PRIOR
from dotcat.training.recipes.cat import PRIOR_ALPHA

#: The seeds every figure is given for, and the more that the variation is measured over
#: where a seed costs nothing (a dev split carved again, a bootstrap resample).
SEEDS = (42, 43, 44)
MORE_SEEDS = tuple(range(42, 62))
#: SciFact's ``train dot`` models: the table tag of each training seed.
DOT_SEEDS = {42: "dot", 43: "dot43", 44: "dot44"}
#: The old calibration guard, compared with the rule: the best weight kept where a paired
#: t-test against weight 0 gave p below this.
OLD_GUARD = 0.05


@dataclass
class Case:
    """One choice problem: the grid's per-query dev rows for each seed, and its test rows."""

    title: str
    order: list
    prior: object
    dev: Callable[[object], dict]  # seed -> point -> dev query -> score
    test: Callable[[object], dict]  # seed -> point -> test query -> score
    seeds: Sequence
    more_seeds: Sequence = ()
    old_guard: bool = False


# -- the dev sets a seed gives ------------------------------------------------------------


def rows(scores: dict, qids: Sequence[str]) -> dict:
    """point -> query -> score over ``qids`` (repeated ids, from a resample, renamed)."""
    seen: Counter = Counter()
    names = []
    for q in qids:
        names.append(q if not seen[q] else f"{q}#{seen[q]}")
        seen[q] += 1
    return {p: {n: row[q] for n, q in zip(names, qids, strict=True)} for p, row in scores.items()}


def bootstrap(qids: Sequence[str], seed: object) -> list[str]:
    """``qids`` resampled with replacement (same size) by ``seed``; ``file``: as they are."""
    if seed == "file":
        return list(qids)
    pick = np.random.default_rng(int(seed)).integers(0, len(qids), len(qids))
    return [qids[i] for i in pick]


def carved(train: Sequence[str], seed: int) -> list[str]:
    """The dev split ``dotcat train`` would carve from ``train`` with ``seed``."""
    import logging

    logging.getLogger("dotcat.data.splits").setLevel(logging.WARNING)
    return split_dev(train, 0.1, seed)[1]


# -- the cases ----------------------------------------------------------------------------


def fusion_cases(work: Path) -> list[Case]:
    cases = []
    for name in tables.COLLECTIONS:
        for model in ("zero-shot", "dot"):
            path = work / "tables" / f"fusion-{name}-{model}.json.gz"
            if path.is_file():
                cases.append(_fusion_case(work, name, model, tables.load(path)))
    return cases


def _fusion_case(work: Path, name: str, model: str, table: dict) -> Case:
    order = list(table["scores"])
    splits = table["splits"]
    title = f"{name}, {'zero-shot' if model == 'zero-shot' else 'train dot'}"

    def test(seed):
        return rows(table["scores"], splits["test"])

    if name == "scifact" and model == "zero-shot":
        return Case(
            title, order, FUSION_PRIOR,
            dev=lambda s: rows(table["scores"], carved(splits["train"], s)),
            test=test, seeds=SEEDS, more_seeds=MORE_SEEDS,
        )  # fmt: skip
    if name == "scifact":
        models = {
            s: tables.load(work / "tables" / f"fusion-scifact-{tag}.json.gz")
            for s, tag in DOT_SEEDS.items()
            if (work / "tables" / f"fusion-scifact-{tag}.json.gz").is_file()
        }
        held_out = carved(splits["train"], DEV_SEED)
        return Case(
            title + " (seed: the model's)", order, FUSION_PRIOR,
            dev=lambda s: rows(models[s]["scores"], held_out),
            test=lambda s: rows(models[s]["scores"], splits["test"]),
            seeds=tuple(models),
        )  # fmt: skip
    return Case(
        title, order, FUSION_PRIOR,
        dev=lambda s: rows(table["scores"], bootstrap(splits["dev"], s)),
        test=test, seeds=(*SEEDS, "file"), more_seeds=MORE_SEEDS,
    )  # fmt: skip


def rerank_case(work: Path) -> list[Case]:
    cases = []
    for path in sorted((work / "tables").glob("rerank-scifact-*.json.gz")):
        table = tables.load(path)
        dev_ids = list(next(iter(table["dev"].values())))
        order = [float(a) for a in table["dev"]]
        for fusion, test_rows in table["test"].items():
            cases.append(Case(
                f"SciFact, {Path(table['model']).name}: interpolation weight (test first stage: "
                f"hybrid, {fusion})", order, PRIOR_ALPHA,
                dev=lambda s, t=table, d=dev_ids: _floats(rows(t["dev"], bootstrap(d, s))),
                test=lambda s, r=test_rows: _floats(r),
                seeds=(*SEEDS, "file"), more_seeds=MORE_SEEDS,
            ))  # fmt: skip
    return cases


def calibrate_cases(work: Path) -> list[Case]:
    cases = []
    for path in sorted((work / "tables").glob("calibrate-*.json.gz")):
        table = tables.load(path)
        if table["test"] is None:  # its pseudo-queries saved, test not scored yet
            continue
        name = path.name.removeprefix("calibrate-").split("-")[0]
        order = [float(a) for a in table["test"]]
        cases.append(Case(
            f"{name}: calibration weight ({table.get('fusion', 'hybrid')} first stage)",
            order, CALIBRATION_PRIOR,
            dev=lambda s, t=table: _floats(t["pseudo"][str(s)]),
            test=lambda s, t=table: _floats(t["test"]),
            seeds=tuple(int(s) for s in table["pseudo"]), old_guard=True,
        ))  # fmt: skip
    return cases


def _floats(table: dict) -> dict:
    return {float(a): row for a, row in table.items()}


# -- choosing and judging -----------------------------------------------------------------


def mean(row: dict) -> float:
    return math.fsum(row.values()) / len(row)


def old_guard(dev: dict, order: list) -> object:
    """``dotcat calibrate``'s choice before the rule: the best, kept where it beat weight 0
    with a paired t-test p < 0.05, else 0."""
    best = max(order, key=lambda a: (round(mean(dev[a]), 6), -a))
    if best == 0.0:
        return 0.0
    queries = sorted(dev[0.0])
    _, p = ttest_pvalue([dev[0.0][q] for q in queries], [dev[best][q] for q in queries])
    return best if p < OLD_GUARD else 0.0


def judge(case: Case, seed) -> dict:
    dev, test = case.dev(seed), case.test(seed)
    picks = {"argmax": argmax(dev, case.order), "rule": choose(dev, case.prior, case.order)}
    if case.old_guard:
        picks["guard"] = old_guard(dev, case.order)
    out = {"seed": seed, "choice": picks["rule"]}
    for name, point in picks.items():
        point = getattr(point, "chosen", point)
        out[name] = point
        out[f"{name}_test"] = mean(test[point])
    queries = sorted(test[out["argmax"]])
    a = [test[out["argmax"]][q] for q in queries]
    b = [test[out["rule"]][q] for q in queries]
    out["p"] = ttest_pvalue(a, b)[1]
    out["diffs"] = np.asarray(b) - np.asarray(a)
    return out


def label(point) -> str:
    return f"{point:g}" if isinstance(point, float) else str(point).removeprefix("linear ")


def spread(points: Sequence) -> str:
    """The points chosen over the seeds, with two measures of how much they vary: the chance
    that two seeds chose the same point (1: never varies) and the standard deviation of the
    weight over the seeds that chose a weight (RRF, a method, is left out of it)."""
    counts = Counter(label(p) for p in points)
    weights = [_weight(p) for p in points if _weight(p) is not None]
    sd = f", sd {np.std(weights):.3f}" if len(weights) > 1 else ""
    listed = ", ".join(f"{p} x{n}" for p, n in counts.most_common())
    return f"{listed} (same {_agreement(points):.2f}{sd})"


def _weight(point) -> float | None:
    if isinstance(point, float):
        return point
    return float(point.split()[1]) if str(point).startswith("linear ") else None


def case_lines(case: Case) -> tuple[list[str], dict]:
    results = [judge(case, s) for s in case.seeds]
    guard = case.old_guard
    lines = [f"### {case.title}", ""]
    head = "| seed | argmax | test | rule | test | rule - argmax | p |"
    lines += [head + (" old guard | test |" if guard else ""), "|" + " --- |" * (9 if guard else 7)]
    for r in results:
        line = (
            f"| {r['seed']} | {label(r['argmax'])} | {r['argmax_test']:.4f} | {label(r['rule'])} "
            f"| {r['rule_test']:.4f} | {r['rule_test'] - r['argmax_test']:+.4f} | {r['p']:.3f} |"
        )
        lines.append(line + (f" {label(r['guard'])} | {r['guard_test']:.4f} |" if guard else ""))
    lines += ["", "Why the rule chose (per seed):", ""]
    lines += [f"- {r['seed']}: {label(r['rule'])}: {r['choice'].reason}" for r in results]
    summary = _summary(case, results)
    lines += ["", *_curve(case, results), ""]
    return lines, summary


def _summary(case: Case, results: list[dict]) -> dict:
    numbered = [r for r in results if r["seed"] != "file"]
    diffs = np.mean([r["diffs"] for r in numbered], axis=0)
    summary = {
        "title": case.title,
        "argmax": np.mean([r["argmax_test"] for r in numbered]),
        "rule": np.mean([r["rule_test"] for r in numbered]),
        "p": ttest_pvalue(np.zeros_like(diffs), diffs)[1],
        "argmax_points": spread([r["argmax"] for r in numbered]),
        "rule_points": spread([r["rule"] for r in numbered]),
        "seeds": len(numbered),
    }
    if case.old_guard:
        summary["guard"] = np.mean([r["guard_test"] for r in numbered])
        summary["guard_points"] = spread([r["guard"] for r in numbered])
    if case.more_seeds:
        more = [judge(case, s) for s in case.more_seeds]
        summary["more"] = {
            "seeds": len(more),
            "argmax": np.mean([r["argmax_test"] for r in more]),
            "rule": np.mean([r["rule_test"] for r in more]),
            "argmax_points": spread([r["argmax"] for r in more]),
            "rule_points": spread([r["rule"] for r in more]),
        }
    return summary


def _curve(case: Case, results: list[dict]) -> list[str]:
    """Dev (each seed) and test means of every point, the tied set marked."""
    lines = ["| point | " + " | ".join(f"dev {r['seed']}" for r in results) + " | test |"]
    lines.append("|" + " --- |" * (len(results) + 2))
    test = case.test(results[0]["seed"])
    for point in case.order:
        cells = []
        for r in results:
            choice = r["choice"]
            mark = "*" if point in choice.tied else ""
            mark += " <" if point == choice.chosen else ""
            cells.append(f"{choice.means[point]:.4f}{mark}")
        lines.append(f"| {label(point)} | " + " | ".join(cells) + f" | {mean(test[point]):.4f} |")
    lines += [
        "",
        "`*` tied with the best (within one paired standard error), `<` the rule's choice.",
    ]
    if case.title.startswith("scifact, train dot"):
        lines.append(
            "Test column: the seed-42 model's; each model's test row is in the table above."
        )
    return lines


def summary_lines(summaries: list[dict]) -> list[str]:
    lines = [
        "| case | seeds | argmax test | rule test | rule - argmax | p | argmax chose | "
        "rule chose |",
        "|" + " --- |" * 8,
    ]
    for s in summaries:
        lines.append(
            f"| {s['title']} | {s['seeds']} | {s['argmax']:.4f} | {s['rule']:.4f} | "
            f"{s['rule'] - s['argmax']:+.4f} | {s['p']:.3f} | {s['argmax_points']} | "
            f"{s['rule_points']} |"
        )
    return lines


def acceptance_lines(summaries: list[dict]) -> list[str]:
    """The issue's acceptance figures over the cases above: the rule's test nDCG@10 against
    argmax's (the mean over cases, the worst case) and in how many cases its chosen point
    varied less over the seeds (the standard deviation of the chosen weight; the chance that
    two seeds chose the same point), over the 3 seeds and over the 20 where a seed is free."""
    lines = []
    for name, pick in (("3 seeds", lambda s: s), ("20 seeds", lambda s: s.get("more"))):
        rows = [(s["title"], pick(s)) for s in summaries if pick(s) and s["seeds"] > 1]
        if not rows:
            continue
        diffs = {t: r["rule"] - r["argmax"] for t, r in rows}
        worst = min(diffs, key=diffs.get)
        sd = [(_sd(r["rule_points"]), _sd(r["argmax_points"])) for _, r in rows]
        same = [(_same(r["rule_points"]), _same(r["argmax_points"])) for _, r in rows]
        lines.append(
            f"- {name}, {len(rows)} cases (a case with one seed left out): rule - argmax on "
            f"test, mean {np.mean(list(diffs.values())):+.4f}, worst {diffs[worst]:+.4f} "
            f"({worst}); the chosen weight's sd lower in {sum(a < b for a, b in sd)}, equal "
            f"in {sum(a == b for a, b in sd)}, higher in {sum(a > b for a, b in sd)}; the chance "
            f"that two seeds agree higher in {sum(a > b for a, b in same)}, equal in "
            f"{sum(a == b for a, b in same)}, lower in {sum(a < b for a, b in same)}."
        )
    return lines


def collection_lines(summaries: list[dict]) -> list[str]:
    """The acceptance read per collection ("never more than 0.003 below it on any
    collection"): each collection's cases (its models and settings) at 3 seeds, the rule's
    test nDCG@10 minus argmax's per case and averaged over the collection's cases; and the
    same mean over 20 seeds where the cases have them."""
    by_name: dict[str, list[dict]] = {}
    for s in summaries:
        if s["seeds"] > 1:
            by_name.setdefault(re.split(r"[,:]", s["title"])[0].lower(), []).append(s)
    lines = [
        "| collection | cases | rule - argmax per case | mean | worst case | mean, 20 seeds |",
        "|" + " --- |" * 6,
    ]
    for name, cases in by_name.items():
        diffs = [s["rule"] - s["argmax"] for s in cases]
        per_case = ", ".join(f"{d:+.4f}" for d in diffs)
        worst = cases[int(np.argmin(diffs))]["title"]
        more = [s["more"]["rule"] - s["more"]["argmax"] for s in cases if s.get("more")]
        more_cell = f"{np.mean(more):+.4f} ({len(more)} cases)" if more else "-"
        lines.append(
            f"| {name} | {len(cases)} | {per_case} | {np.mean(diffs):+.4f} | "
            f"{min(diffs):+.4f} ({worst}) | {more_cell} |"
        )
    return lines


def _sd(spread_text: str) -> float:
    return float(spread_text.split("sd ")[1].rstrip(")")) if "sd " in spread_text else 0.0


def _same(spread_text: str) -> float:
    return float(spread_text.split("(same ")[1].split(",")[0].rstrip(")"))


def more_lines(summaries: list[dict]) -> list[str]:
    lines = [
        "| case | seeds | argmax test | rule test | rule - argmax | argmax chose | rule chose |",
        "|" + " --- |" * 7,
    ]
    for s in summaries:
        if "more" not in s:
            continue
        m = s["more"]
        lines.append(
            f"| {s['title']} | {m['seeds']} | {m['argmax']:.4f} | {m['rule']:.4f} | "
            f"{m['rule'] - m['argmax']:+.4f} | {m['argmax_points']} | {m['rule_points']} |"
        )
    return lines


# -- how the rule's own choices were made: on dev alone ------------------------------------


def _variant(dev: dict, order: list, prior, tie_break: str, z: float = 1.0):
    """The rule with another prior, tie-break (``nearest`` the prior: the rule's; ``central``:
    the median tied point) or ``z``."""
    choice = choose(dev, prior, order, z=z)
    if tie_break == "nearest" or choice.best is None or prior in choice.tied:
        return choice.chosen
    ranked = sorted(choice.tied, key=order.index)
    middle = ranked[(len(ranked) - 1) // 2 : len(ranked) // 2 + 1]
    return max(middle, key=lambda p: (choice.means[p], -order.index(p)))


DEV_VARIANTS = {
    "argmax": None,
    "rule (prior linear 0.5, nearest tied point, z 1)": ("linear 0.5", "nearest", 1.0),
    "first version (prior RRF, most central tied point)": ("rrf", "central", 1.0),
    "most central tied point": ("linear 0.5", "central", 1.0),
    "z 0.5": ("linear 0.5", "nearest", 0.5),
    "z 2": ("linear 0.5", "nearest", 2.0),
}


def dev_cv_lines(work: Path, repeats: int = 100) -> list[str]:
    """Choose the fusion on part of the dev queries, judge it on the rest (SciFact: 101 of
    ``train``'s queries, judged on the other 708; the others: half their dev file, judged on
    the other half), ``repeats`` times: the evidence the rule's prior and tie-break were
    chosen on, without a test query."""
    names = list(DEV_VARIANTS)
    lines = [
        "| collection (zero-shot) | " + " | ".join(names) + " |",
        "|" + " --- |" * (len(names) + 1),
    ]
    for name in tables.COLLECTIONS:
        path = work / "tables" / f"fusion-{name}-zero-shot.json.gz"
        if not path.is_file():
            continue
        table = tables.load(path)
        pool = table["splits"].get("dev") or table["splits"]["train"]
        cut = min(101, len(pool) // 2) if "dev" not in table["splits"] else len(pool) // 2
        choosers = {
            n: (lambda dev, order: argmax(dev, order))
            if spec is None
            else (lambda dev, order, spec=spec: _variant(dev, order, *spec))
            for n, spec in DEV_VARIANTS.items()
        }
        cells = _held_back(table["scores"], pool, cut, choosers, repeats)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Each cell: mean nDCG@10 on the held-back queries minus argmax's, and in brackets the "
        f"chance that two of the {repeats} draws chose the same point (1: never varies).",
    ]
    return lines


def rerank_prior_lines(work: Path, repeats: int = 100) -> list[str]:
    """The re-ranker's prior, on its dev lists alone: ``train cat``'s weight chosen on half of
    the held-out dev queries by argmax and by the rule with each prior (1: the plain
    cross-encoder; 0.5: the grid's centre, equal trust, as the fusion's), judged on the other
    half, ``repeats`` draws."""
    variants = {"argmax": None, "rule, prior 1": 1.0, "rule, prior 0.5": 0.5}
    lines = ["| model (dev queries) | " + " | ".join(variants) + " |"]
    lines.append("|" + " --- |" * (len(variants) + 1))
    for path in sorted((work / "tables").glob("rerank-scifact-*.json.gz")):
        table = tables.load(path)
        scores = _floats(table["dev"])
        pool = list(next(iter(scores.values())))
        choosers = {n: _chooser(prior) for n, prior in variants.items()}
        cells = _held_back(scores, pool, len(pool) // 2, choosers, repeats)
        lines.append(f"| {Path(table['model']).name} ({len(pool)}) | " + " | ".join(cells) + " |")
    return [*lines, "", "Cells as above: held-back dev nDCG@10 minus argmax's (agreement)."]


#: The calibration priors compared (0: the first stage alone, the rule's first prior).
CALIBRATION_PRIORS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)


def _chooser(prior) -> Callable:
    """``f(dev rows, order) -> point``: argmax where ``prior`` is None, else the rule."""
    if prior is None:
        return lambda dev, order: argmax(dev, order)
    return lambda dev, order: choose(dev, prior, order).chosen


def _calibration_tables(work: Path, with_dev: bool = False):
    """``(collection, table)`` of every calibration table with all seeds (and dev rows)."""
    for path in sorted((work / "tables").glob("calibrate-*.json.gz")):
        table = tables.load(path)
        if len(table["pseudo"]) >= len(SEEDS) and (table.get("dev") or not with_dev):
            yield path.name.removeprefix("calibrate-").split("-")[0], table


def _calibration_variants() -> dict:
    return {"argmax": None} | {f"rule, prior {p:g}": p for p in CALIBRATION_PRIORS}


def calibrate_prior_lines(work: Path, repeats: int = 100) -> list[str]:
    """The calibration's prior, on pseudo-queries alone: for each calibration seed, the
    weight chosen on half of its pseudo-queries by argmax and by the rule with each prior in
    :data:`CALIBRATION_PRIORS`, judged on the other half, ``repeats`` draws; cells averaged
    over the seeds. No test query is read."""
    variants = _calibration_variants()
    choosers = {n: _chooser(prior) for n, prior in variants.items()}
    lines = ["| collection (seeds x pseudo-queries) | " + " | ".join(variants) + " |"]
    lines.append("|" + " --- |" * (len(variants) + 1))
    totals: dict = {n: [] for n in variants}
    for name, table in _calibration_tables(work):
        per_seed = []
        for seed_rows in table["pseudo"].values():
            scores = _floats(seed_rows)
            pool = list(next(iter(scores.values())))
            per_seed.append(_held_back_figures(scores, pool, len(pool) // 2, choosers, repeats))
        cells = []
        for n in variants:
            delta = float(np.mean([fig[n][0] for fig in per_seed]))
            totals[n].append(delta)
            cells.append(f"{delta:+.4f} ({np.mean([fig[n][1] for fig in per_seed]):.2f})")
        lines.append(f"| {name} ({len(per_seed)} x {len(pool)}) | " + " | ".join(cells) + " |")
    note = (
        "Cells: held-back pseudo-query nDCG@10 minus argmax's (agreement), mean over the "
        "calibration seeds."
    )
    return _with_mean(lines, totals, lambda v: f"{np.mean(v):+.4f}", note)


def calibrate_dev_lines(work: Path) -> list[str]:
    """The calibration's prior, on the collections' dev queries: for each calibration seed,
    the weight chosen on its pseudo-queries by argmax and by the rule with each prior in
    :data:`CALIBRATION_PRIORS`, judged by the pipeline's nDCG@10 on the collection's real dev
    queries at that weight (SciFact: the held-out split ``train cat`` carves); no test query
    is read. Cells: the mean over the seeds minus argmax's."""
    variants = _calibration_variants()
    lines = ["| collection (dev queries) | " + " | ".join(variants) + " | dev best |"]
    lines.append("|" + " --- |" * (len(variants) + 2))
    totals: dict = {n: [] for n in variants}
    for name, table in _calibration_tables(work, with_dev=True):
        dev = _floats(table["dev"])
        order = list(dev)
        figures = {}
        for n, prior in variants.items():
            chooser = _chooser(prior)
            picks = [chooser(_floats(r), order) for r in table["pseudo"].values()]
            figures[n] = float(np.mean([mean(dev[a]) for a in picks]))
        base = figures["argmax"]
        for n in variants:
            totals[n].append(figures[n] - base)
        best = max(order, key=lambda a: mean(dev[a]))
        cells = [f"{figures[n] - base:+.4f}" for n in variants]
        lines.append(
            f"| {name} ({len(dev[0.0])}) | " + " | ".join(cells) + f" | {label(best)} "
            f"{mean(dev[best]):.4f} |"
        )
    note = (
        "Cells: dev nDCG@10 at the weight chosen on each seed's pseudo-queries, mean over the "
        "calibration seeds, minus argmax's; last column: the best weight on those dev queries."
    )
    return _with_mean(
        lines, totals, lambda v: f"{np.mean(v):+.4f} (worst {min(v):+.4f})", note, tail=" | |"
    )


def _pooled(seed_tables: Sequence[dict]) -> dict:
    """Several calibration seeds' pseudo-queries as one larger set (a document drawn by two
    seeds counts once, with the first seed's scores): what ``--queries`` that many would ask,
    but for the documents each seed cut out of its own small index."""
    pooled: dict = {}
    for table in seed_tables:
        for point, scores in _floats(table).items():
            for qid, value in scores.items():
                pooled.setdefault(point, {}).setdefault(qid, value)
    return pooled


def calibrate_count_lines(work: Path) -> list[str]:
    """How many pseudo-queries ``dotcat calibrate`` asks, judged on the collections' real dev
    queries: the weight chosen by argmax and by the rule (prior :data:`CALIBRATION_PRIOR`) on
    one seed's pseudo-queries (the default ``--queries``), on two seeds' pooled (each pair) and
    on all three pooled, and the dev nDCG@10 of the pipeline at that weight, mean over the
    draws. No test query is read."""
    counts = (1, 2, 3)
    head = [f"{rule} {k} seed{'s' if k > 1 else ''}" for rule in ("rule", "argmax") for k in counts]
    lines = ["| collection (dev queries) | pseudo-queries | " + " | ".join(head) + " |"]
    lines.append("|" + " --- |" * (len(head) + 2))
    totals: dict = {h: [] for h in head}
    for name, table in _calibration_tables(work, with_dev=True):
        dev = _floats(table["dev"])
        order, seeds = list(dev), list(table["pseudo"].values())
        draws = [[_pooled(c) for c in itertools.combinations(seeds, k)] for k in counts]
        sizes = [round(np.mean([len(next(iter(d.values()))) for d in ds])) for ds in draws]
        cells = [
            float(np.mean([mean(dev[rule(d, order)]) for d in ds]))
            for rule in (_chooser(CALIBRATION_PRIOR), _chooser(None))
            for ds in draws
        ]
        for h, value in zip(head, cells, strict=True):
            totals[h].append(value)
        lines.append(
            f"| {name} ({len(dev[0.0])}) | {' / '.join(map(str, sizes))} | "
            + " | ".join(f"{v:.4f}" for v in cells) + " |"
        )  # fmt: skip
    note = (
        "Cells: dev nDCG@10 at the weight chosen, mean over the draws (3 single seeds, 3 pairs, "
        "1 triple); pseudo-queries: how many each draw asked, mean."
    )
    return _with_mean(lines, totals, lambda v: f"{np.mean(v):.4f}", note, lead="| mean | | ")


def _with_mean(
    lines: list[str], totals: dict, cell: Callable, note: str, lead="| mean | ", tail=" |"
) -> list[str]:
    """A table's ``lines`` closed by its mean row (``cell`` of each column's ``totals``) and
    ``note``; nothing where no row was measured."""
    if not any(totals.values()):
        return []
    return [*lines, lead + " | ".join(cell(v) for v in totals.values()) + tail, "", note]


def _held_back(scores: dict, pool: list, cut: int, choosers: dict, repeats: int) -> list[str]:
    """:func:`_held_back_figures` as table cells."""
    figures = _held_back_figures(scores, pool, cut, choosers, repeats)
    return [f"{delta:+.4f} ({same:.2f})" for delta, same in figures.values()]


def _held_back_figures(
    scores: dict, pool: list, cut: int, choosers: dict, repeats: int
) -> dict[str, tuple[float, float]]:
    """Each chooser (``name -> f(dev rows, order) -> point``, ``argmax`` among them) picks on
    ``cut`` shuffled queries of ``pool`` and is judged on the rest, ``repeats`` draws: the
    held-back mean minus argmax's, and the chance that two draws chose the same point."""
    order = list(scores)
    rng = np.random.default_rng(0)
    judged: dict = {n: [] for n in choosers}
    picks: dict = {n: [] for n in choosers}
    for _ in range(repeats):
        shuffled = [pool[i] for i in rng.permutation(len(pool))]
        dev, rest = rows(scores, shuffled[:cut]), shuffled[cut:]
        for name, chooser in choosers.items():
            point = chooser(dev, order)
            judged[name].append(math.fsum(scores[point][q] for q in rest) / len(rest))
            picks[name].append(point)
    base = np.mean(judged["argmax"])
    return {n: (float(np.mean(judged[n]) - base), _agreement(picks[n])) for n in choosers}


def _agreement(points: Sequence) -> float:
    counts = Counter(points)
    return sum(n * n for n in counts.values()) / len(points) ** 2


def prior_lines(work: Path) -> list[str]:
    """RRF against linear 0.5 on each collection's dev split (the split dotcat uses)."""
    lines = ["| collection | dev queries | RRF | linear 0.5 | best (argmax) | RRF tied? |"]
    lines.append("|" + " --- |" * 6)
    for name in tables.COLLECTIONS:
        path = work / "tables" / f"fusion-{name}-zero-shot.json.gz"
        if not path.is_file():
            continue
        table = tables.load(path)
        splits = table["splits"]
        dev = rows(table["scores"], splits.get("dev") or carved(splits["train"], DEV_SEED))
        choice = choose(dev, "rrf", list(dev))
        if choice.best is None:
            continue
        lines.append(
            f"| {name} | {choice.queries} | {choice.means['rrf']:.4f} | "
            f"{choice.means['linear 0.5']:.4f} | {label(choice.best)} "
            f"{choice.means[choice.best]:.4f} | {'yes' if 'rrf' in choice.tied else 'no'} |"
        )
    return lines


def issue_lines(work: Path) -> list[str]:
    """SciFact with the README's ``train dot`` model at fp32, the issue's setting: the held-out
    dev curve and the test curve, and what each rule chose."""
    path = work / "tables" / "fusion-scifact-dot-fp32.json.gz"
    if not path.is_file():
        return []
    table = tables.load(path)
    splits, order = table["splits"], list(table["scores"])
    dev = rows(table["scores"], carved(splits["train"], DEV_SEED))
    test = rows(table["scores"], splits["test"])
    choice = choose(dev, FUSION_PRIOR, order)
    picked = {"argmax": argmax(dev, order), "rule": choice.chosen}
    lines = ["| fusion | dev nDCG@10 (held-out, 101) | test nDCG@10 (300) | chosen by |"]
    lines.append("|" + " --- |" * 4)
    for point in order:
        by = ", ".join(n for n, p in picked.items() if p == point)
        tie = " (tied)" if point in choice.tied else ""
        lines.append(
            f"| {point} | {choice.means[point]:.5f}{tie} | {mean(test[point]):.4f} | {by} |"
        )
    return [*lines, "", f"The rule: {choice.reason}."]


def build(work: Path) -> list[str]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=common.ROOT
    ).stdout.strip()
    lines = common.header(
        "Settings chosen on dev: argmax against the paired one-standard-error rule",
        f"Commit {commit}. Load: {Path('/proc/loadavg').read_text().split()[:3]}.",
    )
    sections = [
        ("Hybrid fusion (`dotcat index`)", fusion_cases(work)),
        ("Re-ranker interpolation weight (`train cat`)", rerank_case(work)),
        ("Calibration weight (`dotcat calibrate`)", calibrate_cases(work)),
    ]
    body, summaries = [], []
    for heading, cases in sections:
        if not cases:
            continue
        body += [f"## {heading}", ""]
        for case in cases:
            case_body, summary = case_lines(case)
            body += case_body
            summaries.append({**summary, "section": heading})
    lines += [
        "## Summary (test nDCG@10, mean over the seeds; p: paired t-test over the test "
        "queries of the per-query difference averaged over the seeds)",
        "",
    ]
    lines += summary_lines(summaries)
    lines += ["", "## The variation over more seeds (where a seed costs nothing)", ""]
    lines += more_lines(summaries)
    lines += ["", "## The issue's acceptance figures (from the two tables above)", ""]
    for heading, _ in sections:
        chosen = [s for s in summaries if s["section"] == heading]
        if chosen:
            lines += [f"{heading}:", "", *acceptance_lines(chosen), ""]
    lines += ["All three settings:", "", *acceptance_lines(summaries)]
    lines += ["", "Per collection (3 seeds; each collection's cases in the summary's order):", ""]
    lines += collection_lines(summaries)
    issue = issue_lines(work)
    if issue:
        lines += ["", "## SciFact, the README's `train dot` model at fp32 (the issue's table)", ""]
        lines += issue
    lines += ["", "## The rule's prior and tie-break, chosen on dev alone", ""]
    lines += [
        "The fusion's prior: RRF (the fusion of an index without dev queries) or linear "
        "0.5, on the dev split dotcat uses:",
        "",
        *prior_lines(work),
        "",
    ]
    lines += [
        "Variants of the rule, each choosing the zero-shot fusion on part of the dev "
        "queries and judged on the rest:",
        "",
        *dev_cv_lines(work),
    ]
    if list((work / "tables").glob("rerank-scifact-*.json.gz")):
        lines += [
            "",
            "The re-ranker's prior, chosen the same way on `train cat`'s held-out dev lists:",
            "",
            *rerank_prior_lines(work),
        ]
    calibration = calibrate_dev_lines(work)
    if calibration:
        lines += [
            "",
            "The calibration's prior, chosen on the collections' dev queries: the weight "
            "`dotcat calibrate` chose on its pseudo-queries, judged on real dev queries:",
            "",
            *calibration,
        ]
    calibration = calibrate_count_lines(work)
    if calibration:
        lines += [
            "",
            "How many pseudo-queries: the weight chosen on one seed's (`--queries 200`, the "
            "default) against two or three seeds' pooled, judged on the same dev queries:",
            "",
            *calibration,
        ]
    calibration = calibrate_prior_lines(work)
    if calibration:
        lines += [
            "",
            "The same priors judged on pseudo-queries alone (each seed's, halved; 100 draws):",
            "",
            *calibration,
        ]
    lines += ["", *body]
    return lines
