"""The semantic pre-step channel: the hook asks the daemon's query thread over a Unix socket
and falls back to its lexical answer when the daemon is down, slow or broken; the socket's
permissions; the scope the daemon answers for; the fusion's floor."""

import json
import os
import socket
import stat
import threading
import time

import numpy as np
import pytest

from recalld import memories
from recalld.core import db, scope, settings
from recalld.core.search import search
from recalld.daemon import query
from recalld.hook import run as hook
from recalld.hook import semantic
from recalld.model import vectors

P1, P2 = "/work/proj-one", "/work/proj-two"

# Concept axes: a text is near every text that names a word of the same concept, whatever its
# other words (a paraphrase, as far as this stand-in knows).
CONCEPTS = [("cents", "price", "euros"), ("deploy", "production", "argo"), ("haiku",)]


class ConceptEncoder:
    model, dim = "concept@0", 8

    def embed(self, texts, batch=32):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            words = set(t.lower().replace("?", " ").replace(".", " ").split())
            for k, c in enumerate(CONCEPTS):
                if words & set(c):
                    out[i, k] = 1.0
            out[i, self.dim - 1] = 0.05  # every text a little alike, none the same
            out[i] /= np.linalg.norm(out[i])
        return out

    def embed_one(self, text):
        return self.embed([text])[0]


class FakePass:
    """What QueryServer reads of recalld.daemon.embedder.EmbedPass."""

    def __init__(self, enc):
        self.encoder = enc
        self.state = {"available": True, "running": True, "reason": None}


def _remember(conn, text, project=P1):
    return memories.remember(conn, text, scope.Scope(project, "main"), check_similar=False).memory["id"]


@pytest.fixture
def stored(conn):
    settings.save({"semantic_wait_ms": 60})  # the wait these tests were written with (default 25)
    ids = {
        "cents": _remember(conn, "Money is integer cents (BIGINT) plus an ISO currency code everywhere."),
        "argo": _remember(conn, "Argo CD syncs ledgerly-prod from the infra/deploy repository."),
        "pool": _remember(conn, "The database pool is a psycopg_pool.AsyncConnectionPool opened in the lifespan."),
        "other": _remember(conn, "Money in this other project is stored as float price euros.", P2),
    }
    vectors.embed_pending(conn, ConceptEncoder())
    return ids


def _serve(server):
    stop = threading.Event()
    t = threading.Thread(target=server.serve, args=(stop, lambda: (db.connect(), None), lambda c, i, w: (c, i)),
                         daemon=True)
    t.start()
    for _ in range(200):
        if server.state["listening"] or not server.state["enabled"]:
            break
        time.sleep(0.01)
    assert server.state["listening"], server.state
    return stop, t


@pytest.fixture(params=["socket", "in-process"])
def daemon(request, home, stored, monkeypatch):
    # what the real daemon answers is under test here, not how fast: a loaded machine (the
    # tests share it) must not turn an answer into a timeout (the deadline still caps it).
    # "socket": the hook as a hook process runs it; "in-process": as the daemon serves it
    # (the query server sets semantic.LOCAL in its own process)
    settings.save({"semantic_wait_ms": 250})
    server = query.QueryServer(FakePass(ConceptEncoder()))
    stop, t = _serve(server)
    assert semantic.LOCAL is server
    if request.param == "socket":
        monkeypatch.setattr(semantic, "LOCAL", None)
    server.path = request.param
    yield server
    stop.set()
    t.join(5)
    assert not t.is_alive()
    assert semantic.LOCAL is None


def _prompt(text, cwd=P1, session="s1"):
    return json.dumps({"hook_event_name": "UserPromptSubmit", "prompt": text, "cwd": cwd,
                       "session_id": session}).encode()


def _hook(text, **kw):
    out, r = hook.run(["prompt-submit", "--agent", "claude"], _prompt(text, **kw))
    return out, r


@pytest.fixture(autouse=True)
def _projects(monkeypatch):
    # fake cwds: the scope resolver's project is the directory itself outside git
    monkeypatch.setattr(scope, "resolve", lambda cwd, payload=None, env=None: scope.Scope(cwd, "main"))


# --- the channel ---------------------------------------------------------------------------


def test_daemon_up_answers_semantically_with_a_paraphrase_lexical_search_misses(daemon, stored, conn):
    text = "How should I write a price of 19.99 in the schema?"
    assert not [h for h in search(conn, text, scope.Scope(P1, "main"), floor=0.3)]  # lexical: nothing
    out, r = _hook(text)
    assert r["detail"]["recall"] == "semantic", r["detail"]
    # no lexical evidence: the dense first choice is told, one line, not delivered whole
    assert r["delivered_ids"] == [] and r["detail"]["told"][0] == f"m:{stored['cents']}"
    assert r["detail"]["via"][0] == "dense"
    assert f"[m{stored['cents']} tell] Money is integer cents" in out
    assert f"(open: recalld show {stored['cents']})" in out
    counter = "answered" if daemon.path == "socket" else "served_in_process"
    for _ in range(100):  # counted after the answer is sent
        if daemon.state[counter]:
            break
        time.sleep(0.01)
    assert daemon.state[counter] == 1


def test_daemon_down_is_the_lexical_answer_exactly(home, stored):
    text = "Where is the AsyncConnectionPool opened?"
    out, r = _hook(text)
    assert r["detail"]["recall"] == "lexical-fallback: down"
    settings.save({"semantic_wait_ms": 0})  # the channel off: today's hook
    out_off, r_off = _hook(text, session="s2")
    assert "recall" not in r_off["detail"]
    assert out == out_off and r["delivered_ids"] == r_off["delivered_ids"] == [f"m:{stored['pool']}"]


def test_a_socket_left_by_a_dead_daemon_is_down(home, stored):
    os.makedirs(semantic.socket_dir(), mode=0o700)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(semantic.socket_path())
    s.close()  # the file stays, nobody listens
    _, r = _hook("Where is the AsyncConnectionPool opened?")
    assert r["detail"]["recall"] == "lexical-fallback: down"
    assert r["delivered_ids"] == [f"m:{stored['pool']}"]


def _fake_daemon(reply):
    """A listener at the real socket path that reads one request and calls reply(conn)."""
    os.makedirs(semantic.socket_dir(), mode=0o700, exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(semantic.socket_path())
    s.listen(4)

    def loop():
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            c.recv(65536)
            reply(c)
            c.close()
    threading.Thread(target=loop, daemon=True).start()
    return s


def test_a_daemon_that_sleeps_is_a_timeout_within_the_wait(home, stored):
    settings.save({"semantic_wait_ms": 50})
    s = _fake_daemon(lambda c: time.sleep(1.0))
    try:
        t0 = time.perf_counter()
        _, r = _hook("Where is the AsyncConnectionPool opened?")
        took = time.perf_counter() - t0
    finally:
        s.close()
    assert r["detail"]["recall"] == "lexical-fallback: timeout"
    assert r["outcome"] == "injected" and r["delivered_ids"] == [f"m:{stored['pool']}"]
    assert took < 0.5


@pytest.mark.parametrize("answer", [b"garbage\n", b'{"v": 1}\n', b'{"hits": [["x", 1]]}\n', b""])
def test_a_garbage_answer_is_an_error(home, stored, answer):
    s = _fake_daemon(lambda c: c.sendall(answer))
    try:
        _, r = _hook("Where is the AsyncConnectionPool opened?")
    finally:
        s.close()
    assert r["detail"]["recall"] == "lexical-fallback: error"
    assert r["delivered_ids"] == [f"m:{stored['pool']}"]


def test_the_wait_never_passes_the_hook_deadline(home, stored):
    settings.save({"semantic_wait_ms": 5000, "deadline_ms": 150})
    s = _fake_daemon(lambda c: time.sleep(2.0))
    try:
        t0 = time.perf_counter()
        _, r = _hook("Where is the AsyncConnectionPool opened?")
        took = time.perf_counter() - t0
    finally:
        s.close()
    assert r["detail"]["recall"] == "lexical-fallback: timeout" and r["outcome"] == "injected"
    assert took < 0.15


# --- access ----------------------------------------------------------------------------------


def test_socket_and_directory_are_the_users_only(daemon):
    path = semantic.socket_path()
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(semantic.socket_dir()).st_mode) == 0o700
    assert not [n for n in os.listdir(semantic.socket_dir()) if n != semantic.SOCKET_NAME]  # no temp name left


def test_the_socket_goes_when_the_daemon_stops(home, stored):
    server = query.QueryServer(FakePass(ConceptEncoder()))
    stop, t = _serve(server)
    stop.set()
    t.join(5)
    assert not os.path.exists(semantic.socket_path())


def test_no_encoder_no_socket(home):
    p = FakePass(None)
    p.state.update(available=False, running=False, reason="no weights")
    server = query.QueryServer(p)
    server.serve(threading.Event(), lambda: (db.connect(), None), lambda c, i, w: (c, i))
    assert not server.state["enabled"] and "no weights" in server.state["reason"]
    assert not os.path.exists(semantic.socket_path())


def test_the_daemon_answers_for_the_scope_asked_only(daemon, stored, conn):
    enc = ConceptEncoder()
    got = daemon.answer(conn, enc, {"q": "a price in euros", "project": P1, "agent": "main", "limit": 10})
    ids = [h[0] for h in got["hits"]]
    assert stored["other"] not in ids and stored["cents"] in ids
    got = daemon.answer(conn, enc, {"q": "a price in euros", "project": P2, "agent": "main", "limit": 10})
    assert [h[0] for h in got["hits"]] == [stored["other"]]


def test_the_hook_reads_the_ids_back_through_its_own_scope(home, stored):
    # a daemon that answers another project's memory (and one that does not exist)
    reply = json.dumps({"v": 1, "hits": [[stored["other"], 0.9, "dense"], [99999, 0.8, "dense"],
                                         [stored["pool"], 0.5, "lexical"]]}).encode() + b"\n"
    s = _fake_daemon(lambda c: c.sendall(reply))
    try:
        _, r = _hook("Where is the AsyncConnectionPool opened?")
    finally:
        s.close()
    assert r["detail"]["recall"] == "semantic"
    assert r["delivered_ids"] == [f"m:{stored['pool']}"]


# --- the fusion's floor ----------------------------------------------------------------------


def test_unrelated_prompts_inject_nothing_through_the_daemon(daemon):
    _, r = _hook("Can you help me write a haiku about autumn leaves?")
    assert r["detail"]["recall"] == "semantic"
    assert r["outcome"] == "nothing" and r["delivered_ids"] == []


def test_fuse_keeps_strong_lexical_order_and_needs_a_clear_dense_winner():
    class H:
        def __init__(self, id, score):
            self.id, self.score, self.rank = id, score, score
    lex = [H(1, 0.9), H(2, 0.7)]
    # strong lexical coverage: the dense side does not re-order, nor add
    assert [i for i, _, _ in query.fuse(lex, [(2, 0.95), (3, 0.9)], 0.3, 5)] == [1, 2]
    # weak lexical coverage, many memories about equally close: nothing dense is admitted
    assert query.fuse([H(1, 0.1)], [(5, 0.7), (6, 0.69), (7, 0.68)], 0.3, 5) == []
    # one clear dense answer: admitted
    assert [i for i, _, v in query.fuse([H(1, 0.1)], [(5, 0.8), (6, 0.5)], 0.3, 5)] == [5]


def test_the_wait_setting_is_validated():
    assert settings.check("semantic_wait_ms", 60) == (60, None)
    assert settings.check("semantic_wait_ms", 0) == (0, None)
    assert settings.check("semantic_wait_ms", -1)[1]
    assert settings.check("semantic_wait_ms", "fast")[1]


def test_fuse_orders_by_the_embedding_only_where_lexical_coverage_is_weak():
    class H:
        def __init__(self, id, score):
            self.id, self.score, self.rank = id, score, score
    weak = [H(1, 0.2), H(2, 0.1)]
    assert [i for i, _, _ in query.fuse(weak, [(2, 0.5), (1, 0.1), (9, 0.3)], None, 5)] == [2, 9, 1]
    strong = [H(1, 0.5), H(2, 0.1)]  # not re-ordered; the dense-only candidate comes last
    assert [i for i, _, _ in query.fuse(strong, [(2, 0.5), (9, 0.3)], None, 5)] == [1, 2, 9]


def test_fuse_scores_a_lexical_candidate_the_dense_top_k_left_out_by_its_own_cosine():
    class H:
        def __init__(self, id, score):
            self.id, self.score, self.rank = id, score, score
    weak = [H(1, 0.2), H(2, 0.1)]
    dense = [(9, 0.5)]  # the dense top k holds neither lexical candidate
    assert [i for i, _, _ in query.fuse(weak, dense, None, 5)] == [9, 1, 2]
    got = query.fuse(weak, dense, None, 5, cos={1: 0.0, 2: 0.45})
    assert [(i, v) for i, _, v in got] == [(9, "dense"), (2, "both"), (1, "lexical")]
    # above the coverage limit the cosines change nothing
    strong = [H(1, 0.6), H(2, 0.1)]
    assert [i for i, _, _ in query.fuse(strong, dense, None, 5, cos={2: 0.9})] == [1, 2, 9]


def test_cosines_of_given_memories_with_and_without_the_index(stored, conn):
    enc = ConceptEncoder()
    q = enc.embed_one("a price in euros")
    want = [stored["cents"], stored["argo"], stored["pool"], 99999]
    plain = vectors.cosines(conn, q, want, model=enc.model)
    index = vectors.VectorIndex(enc.model, enc.dim)
    warm = vectors.cosines(conn, q, want, model=enc.model, index=index)
    assert set(plain) == set(warm) == {stored["cents"], stored["argo"], stored["pool"]}  # 99999: no vector
    for k in plain:
        assert warm[k] == pytest.approx(plain[k], abs=1e-6)
    assert plain[stored["cents"]] > 0.9 > plain[stored["argo"]]
    assert vectors.cosines(conn, q, [stored["cents"]], model="another@0") == {}


def test_the_daemon_scores_lexical_candidates_outside_its_dense_top_k(daemon, stored, conn, monkeypatch):
    enc = ConceptEncoder()
    monkeypatch.setattr(query, "DENSE_K", 1)
    req = {"q": "the price of euros per pool", "project": P1, "agent": "main", "limit": 10, "floor": 0.0}
    got = {h[0]: h for h in daemon.answer(conn, enc, req)["hits"]}
    # "pool" is found lexically, the dense top 1 is the cents memory: the pool memory still
    # gets the bonus of its own (small, positive) cosine, so it is scored by both
    lex = {h.id: h.score for h in search(conn, req["q"], scope.Scope(P1, "main"), floor=0.0)}
    assert stored["pool"] in lex and max(lex.values()) < query.STRONG_LEXICAL, lex
    assert got[stored["cents"]][2] == "dense"
    assert got[stored["pool"]][2] == "both" and got[stored["pool"]][1] > lex[stored["pool"]]


def test_the_benchmarks_embedding_cache_returns_what_the_encoder_gave(tmp_path):
    from recalld.bench.semantic import Cached

    class Counting(ConceptEncoder):
        calls = 0

        def embed(self, texts, batch=32):
            Counting.calls += len(texts)
            return super().embed(texts, batch)

    texts = ["a price in euros", "deploy to production", "a haiku"]
    first = Cached(Counting(), tmp_path / "cache.sqlite")
    a = first.embed(texts)
    again = Cached(Counting(), tmp_path / "cache.sqlite")  # another run: read back, not embedded
    b = again.embed(texts[::-1])
    assert Counting.calls == 3 and again.hits == 3 and again.misses == 0
    assert np.array_equal(a, b[::-1]) and np.array_equal(again.embed_one(texts[0]), a[0])
    other = Counting()
    other.model = "concept@1"  # another model's vectors are not this one's
    Cached(other, tmp_path / "cache.sqlite").embed(texts[:1])
    assert Counting.calls == 4


def test_the_warm_index_keeps_projects_apart_and_multiplies_only_the_scopes_rows(stored, conn, monkeypatch):
    enc = ConceptEncoder()
    shared = memories.remember(conn, "Prices everywhere are shown in euros.", scope.Scope(P2, "main"), scope="shared",
                            check_similar=False).memory["id"]
    vectors.embed_pending(conn, enc)
    index = vectors.VectorIndex(enc.model, enc.dim)
    index.refresh(conn)
    p1 = index.parts[index.codes[P1]]
    assert sorted(p1.ids[:p1.n]) == sorted([stored["cents"], stored["argo"], stored["pool"]])
    assert list(index.parts[vectors._SHARED].ids[:1]) == [shared] and index.n == 5
    rows_multiplied = []
    real = vectors._top

    def spy(scores, k):
        rows_multiplied.append(scores.shape[0])
        return real(scores, k)
    monkeypatch.setattr(vectors, "_top", spy)
    q = enc.embed_one("a price in euros")
    got = [m for m, _ in vectors.dense_search(conn, q, scope.Scope(P2, "main"), 5, model=enc.model, index=index)]
    assert sorted(got) == sorted([stored["other"], shared]) and rows_multiplied[0] == 2  # not P1's three
    got = [m for m, _ in vectors.dense_search(conn, q, scope.Scope("/elsewhere", "main"), 5, model=enc.model,
                                              index=index)]
    assert got == [shared]


def test_a_prefetched_prompt_is_embedded_once_and_a_repeated_one_comes_from_the_cache(home, stored, conn):
    calls = []

    class Counting(ConceptEncoder):
        def embed_one(self, text):
            calls.append(text)
            time.sleep(0.05)  # still being made when the ask comes
            return super().embed_one(text)

    settings.save({"semantic_wait_ms": 1000})
    server = query.QueryServer(FakePass(Counting()))
    stop, t = _serve(server)
    try:
        text = "How should I write a price of 19.99 in the schema?"
        server.prefetch(text)
        job = server.ask(text, scope.Scope(P1, "main"), 15, 0.3)
        got = job.answer(conn, None, time.perf_counter() + 5)
        assert [h[0] for h in got["hits"]] == [stored["cents"]] and not got["ms"]["cached"]
        again = server.ask(text, scope.Scope(P1, "main"), 15, 0.3).answer(conn, None, time.perf_counter() + 5)
        assert again["ms"]["cached"] and again["hits"] == got["hits"]
        assert calls == [text]
        # the fused order carries each candidate's evidence, the injected one marked
        first = got["order"][0]
        assert first[0] == stored["cents"] and first[3] is not None and first[4] == "dense" and first[5] is True
    finally:
        stop.set()
        t.join(5)


def test_the_fused_order_is_read_back_through_the_hooks_scope_with_its_evidence(stored, conn):
    sc = scope.Scope(P1, "main")
    order = [(stored["other"], 3.0, None, 0.9, "dense", True),  # another project's: never
             (stored["cents"], 2.5, 0.1, 0.6, "both", True), (stored["pool"], 0.4, 0.4, None, "lexical", False)]
    got = semantic.read_back_order(conn, sc, order)
    assert [(f.id, f.key, f.lexical, f.cosine, f.via, f.inject) for f in got] == [
        (stored["cents"], 2.5, 0.1, 0.6, "both", True), (stored["pool"], 0.4, 0.4, None, "lexical", False)]

    class Ctx:
        pass

    ctx = Ctx()  # no answer from the daemon: the lexical hits, in their order, no cosine
    hits = search(conn, "Where is the AsyncConnectionPool opened?", sc, floor=0.0)
    lex = semantic.order(ctx, hits, 0.3)
    assert [f.id for f in lex] == [h.id for h in hits] and all(f.cosine is None for f in lex)
    assert [f.inject for f in lex] == [h.score >= 0.3 for h in hits]
    ctx.semantic_order = got
    assert semantic.order(ctx, hits, 0.3) is got
