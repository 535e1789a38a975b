"""The search bench's peer: BM25 over the same corpus with SQLite's FTS5 (Porter stemming),
what a Python agent stack reaches for without a search server. Builds the index in memory,
then runs the queries from argv[2] (one per line) on `threads` threads at once, each with
its own connection (SQLite releases the GIL while it searches), k results each.

    python3 fts5_search.py CORPUS.json QUERIES.txt THREADS K
prints one JSON line: build_s, p50_ms, p99_ms, queries_per_s.
"""
import json
import re
import sqlite3
import sys
import threading
import time

corpus_path, queries_path, threads, k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
articles = list(json.load(open(corpus_path)).values())
queries = [q for q in open(queries_path).read().splitlines() if q.strip()]

start = time.perf_counter()
uri = "file:wiki?mode=memory&cache=shared"
keep = sqlite3.connect(uri, uri=True, check_same_thread=False)
keep.execute("create virtual table docs using fts5(title, body, tokenize='porter unicode61')")
keep.executemany("insert into docs(title, body) values (?, ?)",
                 [(a["title"], f'{a.get("description", "")} {a["extract"]}') for a in articles])
keep.commit()
build_s = time.perf_counter() - start


def fts_query(text):
    words = re.findall(r"\w+", text)
    return " OR ".join(f'"{w}"' for w in words) or '""'


latencies = []
lock = threading.Lock()


def worker(mine):
    con = sqlite3.connect(uri, uri=True, check_same_thread=False)
    own = []
    for q in mine:
        t = time.perf_counter()
        con.execute("select title from docs where docs match ? order by bm25(docs, 2.0, 1.0) limit ?",
                    (fts_query(q), k)).fetchall()
        own.append((time.perf_counter() - t) * 1e3)
    with lock:
        latencies.extend(own)


start = time.perf_counter()
workers = [threading.Thread(target=worker, args=(queries[i::threads],)) for i in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
wall = time.perf_counter() - start
latencies.sort()
q = lambda p: latencies[round((len(latencies) - 1) * p)]
print(json.dumps({"build_s": build_s, "p50_ms": q(0.5), "p99_ms": q(0.99),
                  "queries_per_s": len(latencies) / wall}))
