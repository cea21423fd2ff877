"""What the cost model of sharded search predicts for 100M and 1B passages (docs/scale.md).

    python eval/benchmarks/shards_model.py [--qps 200] [--node-gib 64] [--node-cores 16]

Reads the constants ``bench_shards_cost.py`` measured on this machine (its
``shards_cost.json``) and predicts, for collections of 100M and 1B passages (384-d vectors,
as all-MiniLM-L6-v2's), each split into N shards: memory per shard replica, replicas per
shard for ``--qps`` queries a second, nodes of ``--node-gib`` GiB and ``--node-cores`` cores,
and the hybrid first stage's p50 and p99 at that load. Nothing here is measured: every figure
it writes is the model's prediction from the measured constants (written beside them).

**The model.** A shard of ``n`` vectors held by one actor on one core:

* memory ``M(n) = A + n * (b_v + b_t)``: ``A`` an empty actor's resident set (Python, Ray,
  FAISS, NumPy), ``b_v`` the FAISS index's bytes per vector (the slope between the two
  measured sizes, so the quantizers' fixed part drops out), ``b_t`` BM25's bytes per row
  (score matrix, term counts, ids: SciFact's passage shards). The doc store (``b_d`` per
  passage) is on disk, read a few rows a query.
* one query's search ``S(n) = t_dense(n) + t_bm25(n)``, one thread:
  Flat ``a + c_flat * n``; HNSW32 ``a + c * log2(n)`` (efSearch 128; taken as flat at the
  slower of the two sizes when the larger measured faster); IVF-PQ48 with
  ``nlist = 4 * sqrt(n)`` (FAISS's guideline) and nprobe 32:
  ``a + c_flat * nlist + c_code * 32 * n / nlist`` (the coarse quantizer is a Flat scan of
  the centroids, then 32 lists of PQ codes), ``c_code`` from the two measured IVF1024 sizes;
  BM25 ``a + c_bm25 * n`` (bm25s reads the query terms' posting columns: linear in n).
  An intercept ``a`` below zero (the line through two points) is taken as zero.
* the front: the query's encoding ``e``, three fan-outs (dense, BM25, the texts)
  ``f(N) = f0 + f1 * N`` (least squares over the measured N = 1, 2, 4), two rounds each
  bringing back N answers of 100 matches, ``r`` each (:func:`answer_ms`: the slope of a
  round's time over N = 1, 2, 4 shards, beyond ``f(N)``; the front unpickles them one by
  one), and two k-way merges ``m(N)`` (measured up to N = 1024).
* load: a shard's R replicas share ``qps`` queries a second; each replica is an M/M/1 queue
  (service rate ``mu = 1 / S``, arrivals ``lam = qps / R``), so its response time is
  exponential with rate ``mu - lam``; an answer waits for the slowest of N shards, taken as
  independent (which errs high: Nelson and Tantawi, IEEE Trans. Computers 1988, on fork-join
  queues). Its q-quantile::

      T_q(N) = e + 3 f(N) + 2 N r + 2 m(N) + -ln(1 - q ** (1 / N)) / (mu - lam)

  R is the least number of replicas, and at least 2 (one may die), that keeps each
  replica's utilization ``lam / mu`` at or under 0.5.
* nodes: replicas packed by memory (75% of a node's) and cores (one each).

Writes ``eval/benchmarks/results/shards_model.md`` and ``shards_model.json``.
"""

from __future__ import annotations

import json
import math

import common

GIB = 2**30
SIZES = {"100M": 100_000_000, "1B": 1_000_000_000}
SHARD_COUNTS = (16, 64, 256, 1024)
KINDS = {"IVF-PQ48": "IVF1024,PQ48", "HNSW32": "HNSW32", "Flat": "Flat"}
MAX_UTILIZATION = 0.5
NODE_MEMORY_SHARE = 0.75


def _line(x0: float, y0: float, x1: float, y1: float) -> tuple[float, float]:
    """Intercept and slope of the line through two points."""
    slope = (y1 - y0) / (x1 - x0)
    return y0 - slope * x0, slope


def answer_ms(costs: dict) -> float:
    """``r``: one shard's answer of 100 matches in a round (ms), beyond the fan-out of a
    trivial call: the least-squares slope over N = 1, 2, 4 of a dense or BM25 round's time
    less ``f(N)``, the mean of the two (the search itself is the same in each)."""
    ray, fan = costs["ray"], costs["ray"]["fanout_ms_1"]
    slopes = []
    for name in ("dense", "bm25"):
        rounds = ray[f"{name}_round_ms"]
        ns = sorted(int(n) for n in rounds)
        extra = [rounds[str(n)][0] - fan[str(n)][0] for n in ns]
        slopes.append(_least_squares([float(n) for n in ns], extra)[1])
    return max(0.0, sum(slopes) / len(slopes))


def constants(costs: dict) -> dict:
    """The model's constants from bench_shards_cost.py's measurements."""
    faiss = {}
    for name, spec in KINDS.items():
        rows = sorted((r for r in costs["faiss"] if r["spec"] == spec), key=lambda r: r["n"])
        lo, hi = rows[0], rows[-1]
        _, bytes_per = _line(lo["n"], lo["bytes_per_vector"] * lo["n"],
                             hi["n"], hi["bytes_per_vector"] * hi["n"])  # fmt: skip
        faiss[name] = {"bytes": bytes_per, "points": [(r["n"], r["ms"]) for r in (lo, hi)]}
    (n0, t0), (n1, t1) = faiss["Flat"]["points"]
    flat_a, c_flat = _line(n0, t0, n1, t1)
    faiss["Flat"]["time"] = {"a": max(0.0, flat_a), "c": c_flat}
    (n0, t0), (n1, t1) = faiss["HNSW32"]["points"]
    hnsw = _ac(_line(math.log2(n0), t0, math.log2(n1), t1))
    if hnsw["c"] < 0:  # the larger graph measured faster (noise): taken as flat, at the slower
        hnsw = {"a": max(t0, t1), "c": 0.0}
    faiss["HNSW32"]["time"] = hnsw
    (n0, t0), (n1, t1) = faiss["IVF-PQ48"]["points"]  # nlist 1024, nprobe 32
    a, c_code = _line(n0 * 32 / 1024, t0, n1 * 32 / 1024, t1)
    ivf_a = max(0.0, a - c_flat * 1024)
    faiss["IVF-PQ48"]["time"] = {"a": ivf_a, "c_flat": c_flat, "c_code": c_code}
    (m0, s0), (m1, s1) = [(r["n"], r["ms"]) for r in costs["bm25"]["search"]]
    fan = {int(n): v[0] for n, v in costs["ray"]["fanout_ms_1"].items()}
    f0, f1 = _least_squares(list(fan), list(fan.values()))
    return {
        "actor_mib": costs["ray"]["empty_actor_mib"],
        "faiss": faiss,
        "bm25_bytes": costs["bm25"]["bytes_per_row"]["passages"],
        "bm25_time": _ac(_line(m0, s0, m1, s1)),
        "docstore_bytes": costs["bm25"].get("docstore_bytes_per_row", {}).get("passages"),
        "encode_ms": costs["ray"]["encode_ms"][0],
        "fanout": {"f0": f0, "f1": f1},
        "answer_ms": answer_ms(costs),
        "merge_us": {int(n): v for n, v in costs["merge_us"].items()},
    }


def _ac(line: tuple[float, float]) -> dict[str, float]:
    return {"a": line[0], "c": line[1]}


def _least_squares(xs: list[float], ys: list[float]) -> tuple[float, float]:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    covariance = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope = covariance / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def dense_ms(c: dict, kind: str, n: float) -> float:
    t = c["faiss"][kind]["time"]
    if kind == "Flat":
        return t["a"] + t["c"] * n
    if kind == "HNSW32":
        return t["a"] + t["c"] * math.log2(n)
    nlist = 4 * math.sqrt(n)
    return t["a"] + t["c_flat"] * nlist + t["c_code"] * 32 * n / nlist


def merge_ms(c: dict, shards: int) -> float:
    """The measured merge of the nearest measured N at or above ``shards`` (ms)."""
    above = [n for n in sorted(c["merge_us"]) if n >= shards] or [max(c["merge_us"])]
    return c["merge_us"][above[0]] / 1000


def predict(c: dict, kind: str, passages: int, shards: int, args) -> dict:
    """One row: a collection of ``passages`` in ``shards`` shards of ``kind``."""
    n = passages / shards
    memory = c["actor_mib"] * 2**20 + n * (c["faiss"][kind]["bytes"] + c["bm25_bytes"])
    service = dense_ms(c, kind, n) + c["bm25_time"]["a"] + c["bm25_time"]["c"] * n
    replicas = max(2, math.ceil(args.qps * service / 1000 / MAX_UTILIZATION))
    lam, mu = args.qps / replicas / 1000, 1 / service  # per ms
    fixed = c["encode_ms"] + 3 * (c["fanout"]["f0"] + c["fanout"]["f1"] * shards)
    fixed += 2 * shards * c["answer_ms"]
    fixed += 2 * merge_ms(c, shards)

    def quantile(q: float) -> float:
        return fixed - math.log(1 - q ** (1 / shards)) / (mu - lam)

    actors = shards * replicas
    per_node = min(args.node_cores, int(NODE_MEMORY_SHARE * args.node_gib * GIB // memory))
    nodes = math.ceil(actors / per_node) if per_node else None
    return {
        "kind": kind, "passages": passages, "shards": shards, "rows_per_shard": n,
        "replica_gib": memory / GIB, "service_ms": service, "replicas": replicas,
        "nodes": nodes, "node_gib": actors * memory / nodes / GIB if nodes else None,
        "p50_ms": quantile(0.5), "p99_ms": quantile(0.99),
    }  # fmt: skip


def _row(r: dict) -> str:
    nodes = "does not fit" if r["nodes"] is None else f"{r['nodes']}"
    node_gib = "-" if r["node_gib"] is None else f"{r['node_gib']:.1f}"
    return (
        f"| {r['kind']} | {r['shards']} | {r['rows_per_shard'] / 1e6:.2f}M | "
        f"{r['replica_gib']:.2f} | {r['service_ms']:.1f} | {r['replicas']} | {nodes} | "
        f"{node_gib} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} |"
    )


def main() -> None:
    p = common.parser(__doc__, output="shards_model.md")
    p.add_argument("--qps", type=float, default=200.0, help="queries a second (default 200)")
    p.add_argument("--node-gib", type=float, default=64.0, help="memory of a node (GiB)")
    p.add_argument("--node-cores", type=int, default=16, help="cores of a node")
    args = p.parse_args()
    costs_file = args.output.with_name("shards_cost.json")
    costs = json.loads(costs_file.read_text())
    c = constants(costs)
    rows = [
        predict(c, kind, passages, shards, args)
        for passages in SIZES.values()
        for kind in KINDS
        for shards in SHARD_COUNTS
    ]
    record = {"constants": c, "qps": args.qps, "node_gib": args.node_gib,
              "node_cores": args.node_cores, "predictions": rows}  # fmt: skip
    args.output.with_suffix(".json").write_text(json.dumps(record, indent=2), encoding="utf-8")
    lines = common.header(
        "The cost model's predictions for 100M and 1B passages (not measured)",
        f"Constants from {common.shown(costs_file)} (measured {costs['load'][0]}).",
    )
    lines += [
        f"Every figure below is a **prediction**: hybrid first stage (dense + BM25, top 100), "
        f"{args.qps:g} queries/s, nodes of {args.node_gib:g} GiB and {args.node_cores} "
        f"cores (75% of the memory for shards, one core a replica), replicas keeping each "
        f"under {MAX_UTILIZATION:.0%} busy, at least 2. Formulas: this script's docstring "
        "and docs/scale.md.",
        "",
        "Constants (ms, bytes; measured by bench_shards_cost.py):",
        "",
        "```json",
        json.dumps(c, indent=2),
        "```",
        "",
    ]
    for label, passages in SIZES.items():
        lines += [
            f"## {label} passages",
            "",
            "| index | shards | rows/shard | GiB/replica | S ms | replicas/shard | nodes | "
            "GiB/node | p50 ms | p99 ms |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            *(_row(r) for r in rows if r["passages"] == passages),
            "",
        ]
    common.write(args.output, lines)
    for r in rows:
        print(_row(r))


if __name__ == "__main__":
    main()
