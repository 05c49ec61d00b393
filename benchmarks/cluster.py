"""Throughput of the Redis store on one node against a 3-master Redis Cluster.

Both deployments are private ``redis-server`` processes this script starts on free loopback
ports (``tests/redis_servers.py``) and stops at the end; the shared server is not used, so
other work on it does not skew the comparison. The single node runs the same server binary
and settings as each cluster node, without ``cluster-enabled``.

Workload: ``W`` worker processes (forked; each with its own guard, store and connection
pool), each calling a no-op ``@mutating`` tool with never-seen arguments (the executed path:
claim, run, record; two round trips) round-robin over 8 tasks of its own, so the tasks
spread over the cluster's slots. Each setting runs ``--seconds`` per round; the rounds
interleave the settings in a fresh shuffled order, and a setting's figure is its median
calls/s over rounds. Beside it, the CPUs the Redis processes used meanwhile (``INFO cpu``):
where that stays well under one CPU while the workers fill the machine, the clients, not
Redis, are the limit, and more Redis nodes cannot help.

Threads (the Redis target): 1, 2 and 4 threads of one process sharing one guard and
one ``RedisStore`` (one connection pool) on the single node, each on its own task, same
workload, interleaved with the rest; the target is N threads ≥ 0.7 N x one thread's calls/s.

Run: ``python benchmarks/cluster.py`` (≈1 min; writes ``benchmarks/results/cluster.json``
and ``.md``), ``--smoke`` for a seconds-long check of every code path.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import toolguard as tg  # noqa: E402
from tests.redis_servers import Cluster, Server, server  # noqa: E402
from toolguard.stores.redis import RedisStore  # noqa: E402

TASKS_PER_WORKER = 8


def _worker(url: str, cluster: bool, prefix: str, k: int, start_at: float, seconds: float,
            results: Any) -> None:
    store = RedisStore(url=url, cluster=cluster, key_prefix=prefix, timeout_s=5.0)

    @tg.mutating
    def write(n: int) -> int:
        return n

    guard = tg.Guard(tg.Policy(), [write], store=store)
    tasks = [guard.task(f"w{k}-t{j}") for j in range(TASKS_PER_WORKER)]
    for task in tasks:  # connections open, scripts loaded, slots known
        task.call("write", {"n": -1})
    calls = 0
    time.sleep(max(0.0, start_at - time.time()))
    end = start_at + seconds
    while time.time() < end:
        result = tasks[calls % TASKS_PER_WORKER].call("write", {"n": calls})
        assert result.decision == "allow", result
        calls += 1
    results.put(calls / seconds)
    store.close()


def _server_cpu_s(servers: list[Server]) -> float:
    """CPU seconds (user + system) the Redis processes have used so far."""
    total = 0.0
    for srv in servers:
        client = srv.client()
        try:
            info = client.info("cpu")
            total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        finally:
            client.close()
    return total


def _round(url: str, cluster: bool, workers: int, seconds: float, tag: str) -> float:
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    start_at = time.time() + 0.5 + 0.05 * workers  # every worker ready before the clock runs
    prefix = f"tgbench:{tag}:{os.urandom(4).hex()}"
    procs = [ctx.Process(target=_worker, args=(url, cluster, prefix, k, start_at, seconds,
                                                results)) for k in range(workers)]
    for p in procs:
        p.start()
    total = sum(results.get(timeout=60 + seconds) for _ in procs)
    for p in procs:
        p.join(timeout=10)
    return float(total)


def _threads_round(url: str, threads: int, seconds: float) -> float:
    """Calls/s of ``threads`` threads sharing one guard and one store (one connection pool),
    each on its own task, on the executed path."""
    store = RedisStore(url=url, key_prefix=f"tgbench:threads:{os.urandom(4).hex()}",
                       timeout_s=5.0)

    @tg.mutating
    def write(k: int, n: int) -> int:
        return n

    guard = tg.Guard(tg.Policy(), [write], store=store)
    counts = [0] * threads
    ready = threading.Barrier(threads + 1)
    end = [0.0]

    def work(k: int) -> None:
        task = guard.task(f"thread-{k}")
        task.call("write", {"k": k, "n": -1})
        ready.wait()
        n = 0
        while time.perf_counter() < end[0]:
            task.call("write", {"k": k, "n": n})
            n += 1
        counts[k] = n

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    end[0] = time.perf_counter() + 0.2 + seconds
    ready.wait()
    for w in workers:
        w.join()
    store.close()
    return sum(counts) / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per setting and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", default="1,4,16", help="worker counts, comma-separated")
    parser.add_argument("--smoke", action="store_true", help="0.3 s, 1 round, 1 and 2 workers")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" /
                        "cluster.json")
    opts = parser.parse_args()
    counts = [1, 2] if opts.smoke else [int(w) for w in opts.workers.split(",")]
    thread_counts = [1, 2] if opts.smoke else [1, 2, 4]
    seconds, rounds = (0.3, 1) if opts.smoke else (opts.seconds, opts.rounds)

    single = server()
    try:
        with Cluster(3) as cluster:
            where = {"node": (single.url, False), "cluster": (cluster.url, True)}
            servers = {"node": [single], "cluster": cluster.nodes}
            samples: dict[tuple[str, int], list[float]] = {
                (d, w): [] for d in where for w in counts}
            redis_cpu: dict[tuple[str, int], list[float]] = {key: [] for key in samples}
            for n in thread_counts:
                samples["threads", n] = []
                redis_cpu["threads", n] = []
            where["threads"] = (single.url, False)
            servers["threads"] = [single]
            for r in range(rounds):
                order = list(samples)
                random.shuffle(order)
                for deployment, workers in order:
                    url, is_cluster = where[deployment]
                    cpu = _server_cpu_s(servers[deployment])
                    got = (_threads_round(url, workers, seconds) if deployment == "threads"
                           else _round(url, is_cluster, workers, seconds,
                                       f"{r}{deployment}{workers}"))
                    share = (_server_cpu_s(servers[deployment]) - cpu) / seconds
                    samples[deployment, workers].append(got)
                    redis_cpu[deployment, workers].append(share)
                    print(f"round {r + 1}/{rounds} {deployment:7} {workers:2} workers: "
                          f"{got:8.0f} calls/s, Redis used {share:.2f} CPUs", flush=True)
    finally:
        single.stop()

    threads = {n: round(statistics.median(samples.pop(("threads", n)))) for n in thread_counts}
    thread_cpu = {n: statistics.median(redis_cpu.pop(("threads", n))) for n in thread_counts}
    rows = [{"deployment": d, "workers": w, "calls_per_s": round(statistics.median(s)),
             "samples": [round(x) for x in s],
             "redis_cpus": round(statistics.median(redis_cpu[d, w]), 2)}
            for (d, w), s in samples.items()]
    cpus = {(r["deployment"], r["workers"]): r["redis_cpus"] for r in rows}
    rate = {(d, w): round(statistics.median(s)) for (d, w), s in samples.items()}
    top = max(counts)
    ratio = rate["cluster", top] / rate["node", top]
    report: dict[str, Any] = {
        "meta": {"smoke": opts.smoke, "seconds": seconds, "rounds": rounds,
                 "tasks_per_worker": TASKS_PER_WORKER, "cpus": os.cpu_count(),
                 "python": platform.python_version(), "when": time.strftime("%Y-%m-%d %H:%M")},
        "throughput": rows,
        "target": {"metric": f"cluster/node calls/s at {top} workers", "ratio": round(ratio, 2),
                   "target": 2.0, "status": "PASS" if ratio >= 2.0 else "MISS"},
        "threads": [{"threads": n, "calls_per_s": threads[n],
                     "x_n_one_thread": round(threads[n] / (n * threads[1]), 2),
                     "redis_cpus": round(thread_cpu[n], 2),
                     "status": "PASS" if threads[n] >= 0.7 * n * threads[1] else "MISS"}
                    for n in thread_counts],
    }
    opts.json.parent.mkdir(parents=True, exist_ok=True)
    opts.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    lines = ["| workers | one node (calls/s) | 3-master cluster (calls/s) | cluster / node "
             "| CPUs used by Redis (node / cluster) |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {w} | {rate['node', w]} | {rate['cluster', w]} | "
              f"{rate['cluster', w] / rate['node', w]:.2f} | "
              f"{cpus['node', w]:.2f} / {cpus['cluster', w]:.2f} |" for w in counts]
    target = report["target"]
    lines.append(f"\nTarget ({target['metric']} ≥ 2.0): {ratio:.2f} {target['status']} "
                 f"({os.cpu_count()} CPUs shared by the workers and every Redis process).")
    lines += ["", "| threads on one store | calls/s | ÷ (N x one thread), target ≥ 0.7 "
              "| CPUs used by Redis |", "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {t['threads']} | {t['calls_per_s']} | {t['x_n_one_thread']:.2f} "
              f"{t['status']} | {t['redis_cpus']:.2f} |" for t in report["threads"]]
    opts.json.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
