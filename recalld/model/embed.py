"""The embedder role: sentence embeddings (all-MiniLM-L6-v2), numpy over the safetensors weights.

Computed in the daemon and the CLI, never in the hook (numpy is not on the hot path). The
bundle (recalld.model.resolve.resolve_embedder says which) holds model.safetensors, read here
by hand (an 8-byte header length, a JSON header, raw little-endian arrays) so no safetensors
or torch is needed, tokenizer.json for the `tokenizers` library, and config.json for the
shape. The forward pass is BERT's: embeddings + LayerNorm, N post-norm encoder layers
(self-attention, GELU feed-forward), then mean pooling over the real tokens and an L2 norm,
as sentence-transformers runs this model (max 256 word pieces, the rest cut).

numpy rather than llama.cpp's embedding mode: the model ships as safetensors, a GGUF would
need a conversion step and a second file to keep in sync, and numpy is faster on batches, where
the work is (docs/evaluation.md, "numpy rather than llama.cpp's embedding mode").

A vector's `model` is the bundle's name plus the first 16 hex digits of its weights' sha256,
so the same weights from the package, a pull or a copy give one id, and vectors of another
model are never compared with this one's.
"""

import hashlib
import json
import math
import os
import sys
import threading
import zipfile

# One BLAS thread unless RECALLD_EMBED_THREADS says otherwise. OpenBLAS reads it when numpy is
# first imported, so the daemon, the CLI and recalld.model.vectors import this module before
# numpy; BLAS_THREADS says what numpy actually got ("unknown" when it was loaded earlier).
# OpenBLAS's threads spin while the agent, the judge and the hook want the same cores, so a
# second thread made queries and scans slower, not faster (docs/evaluation.md, "One thread for
# each model").
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ.get("RECALLD_EMBED_THREADS", "1"))
    BLAS_THREADS = os.environ["OPENBLAS_NUM_THREADS"]
else:
    BLAS_THREADS = "unknown"

import numpy as np  # noqa: E402

from recalld.model import resolve
from recalld.model.errors import LLMError, Unavailable

MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
BATCH = 32
# A batch also stops at this many padded tokens: attention holds batch x 12 x n x n floats, so
# 32 texts of 256 pieces would take 100 MB where 16 take 50.
BATCH_TOKENS = 4096
# RECALLD_EMBED_RUNTIME: the onnxruntime graph with int8 weights (the default), the same graph
# in float32, or the numpy pass (float32, no onnxruntime)
RUNTIMES = ("int8", "float32", "numpy")
LN_EPS = 1e-12
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


# erf(x) ~ x P(x^2) / Q(x^2) on [-4, 4] (beyond it erf is +-1 in float32): the rational
# approximation Eigen and XLA use for float32, absolute error under 5e-7. numpy has no erf, BERT's
# GELU is the exact (erf) one, and this form has no exp, so it beat Abramowitz-Stegun 7.1.26
# where GELU was a third of the forward pass (docs/evaluation.md, "The embedder").
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def _erf(x: np.ndarray) -> np.ndarray:
    x = np.minimum(x, 4.0)
    np.maximum(x, -4.0, out=x)
    x2 = x * x
    p = x2 * _ERF_P[0]
    for c in _ERF_P[1:-1]:
        p += c
        p *= x2
    p += _ERF_P[-1]
    p *= x
    q = x2 * _ERF_Q[0]
    for c in _ERF_Q[1:-1]:
        q += c
        q *= x2
    q += _ERF_Q[-1]
    p /= q
    return p


def _gelu_(x: np.ndarray, rows: int = 256) -> np.ndarray:
    """GELU in place on a 2-D array, `rows` rows at a time: erf's five temporaries then stay a
    few hundred KB, in cache, instead of five copies of the whole activation (~80 MB at the
    peak for a batch of 32 x 80 tokens)."""
    r2 = np.float32(1 / math.sqrt(2))
    for s in range(0, x.shape[0], rows):
        c = x[s:s + rows]
        e = _erf(c * r2)
        e += 1.0
        e *= 0.5
        c *= e
    return x


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    d = x - mu
    var = (d * d).mean(-1, keepdims=True)
    return d / np.sqrt(var + LN_EPS) * w + b


def read_safetensors(buf) -> dict:
    """{name: array} over `buf` (bytes or a memoryview), without copying the data."""
    buf = memoryview(buf)
    if len(buf) < 8:
        raise LLMError("not a safetensors file (shorter than its header length)")
    n = int.from_bytes(buf[:8], "little")
    if n <= 0 or 8 + n > len(buf):
        raise LLMError("not a safetensors file (bad header length)")
    try:
        header = json.loads(bytes(buf[8:8 + n]))
    except ValueError as e:
        raise LLMError(f"not a safetensors file (header: {e})") from None
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = _DTYPES.get(info.get("dtype"))
        if dt is None:
            raise LLMError(f"safetensors tensor {name}: unsupported dtype {info.get('dtype')}")
        lo, hi = info["data_offsets"]
        shape = tuple(info["shape"])
        arr = np.frombuffer(buf[base + lo:base + hi], dtype=np.dtype(dt).newbyteorder("<"))
        out[name] = arr.reshape(shape)
    return out


def _read_bundle(path: str, names) -> dict:
    """{file name: bytes} of the bundle at `path` (a directory or a .zip); missing -> absent."""
    out = {}
    if os.path.isdir(path):
        for n in names:
            p = os.path.join(path, n)
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    out[n] = f.read()
        return out
    with zipfile.ZipFile(path) as z:
        have = {i.filename: i for i in z.infolist()}
        for n in names:
            if n in have:
                # into one preallocated buffer: z.read() would hold the compressed and the
                # inflated weights at once (~170 MB at the peak instead of ~90)
                buf = bytearray(have[n].file_size)
                view, got = memoryview(buf), 0
                with z.open(have[n]) as f:
                    while got < len(buf):
                        k = f.readinto(view[got:got + (1 << 20)])  # readinto reads what it is given
                        if not k:
                            raise LLMError(f"{path}: {n} is shorter in the zip than its header says")
                        got += k
                out[n] = buf
    return out


class Encoder:
    """One loaded embedder. `embed` is thread-safe (the arrays are read-only; numpy releases
    the GIL in its matrix products)."""

    def __init__(self, path: str, source: "str | None" = None):
        from tokenizers import Tokenizer

        files = _read_bundle(path, resolve.BUNDLE_FILES + ("sentence_bert_config.json",))
        missing = [n for n in resolve.BUNDLE_FILES if n not in files]
        if missing:
            raise LLMError(f"{path}: not an embedder bundle (missing {', '.join(missing)})")
        self.path, self.source = path, source
        cfg = json.loads(files["config.json"])
        if cfg.get("model_type") not in ("bert", None):
            raise LLMError(f"{path}: a {cfg.get('model_type')} model; the embedder runs BERT models")
        self.heads = int(cfg.get("num_attention_heads", 12))
        self.n_layers = int(cfg.get("num_hidden_layers", 6))
        self.dim = int(cfg.get("hidden_size", 384))
        st = json.loads(files.get("sentence_bert_config.json") or b"{}")
        self.max_tokens = int(st.get("max_seq_length") or MAX_TOKENS)
        weights = files.pop("model.safetensors")
        self.sha256 = hashlib.sha256(weights).hexdigest()
        label = os.path.basename(os.path.dirname(path) if path.endswith(".zip") else path.rstrip("/"))
        for e in resolve.read_manifest():
            for f in e.get("files") or ():
                if f.get("name") == "model.safetensors" and f.get("sha256") == self.sha256:
                    label = e["name"]
        self.model = f"{label}@{self.sha256[:16]}"
        self._weights = weights  # the arrays below are views of these bytes
        # float32 throughout (a view for float32 weights; other float dtypes are converted once)
        t = {k: v if v.dtype == np.float32 or v.dtype.kind != "f" else v.astype(np.float32)
             for k, v in read_safetensors(weights).items()}
        pre = "bert." if "bert.embeddings.word_embeddings.weight" in t else ""
        try:
            self.word = t[pre + "embeddings.word_embeddings.weight"]
            self.pos = t[pre + "embeddings.position_embeddings.weight"]
            self.type0 = t[pre + "embeddings.token_type_embeddings.weight"][0]
            self.ln0 = (t[pre + "embeddings.LayerNorm.weight"], t[pre + "embeddings.LayerNorm.bias"])
            self.layers = []
            for i in range(self.n_layers):
                g = lambda k: t[f"{pre}encoder.layer.{i}.{k}"]  # noqa: E731
                qkv_w = np.concatenate([g("attention.self.query.weight"), g("attention.self.key.weight"),
                                        g("attention.self.value.weight")]).T.copy()
                qkv_b = np.concatenate([g("attention.self.query.bias"), g("attention.self.key.bias"),
                                        g("attention.self.value.bias")])
                self.layers.append((
                    qkv_w, qkv_b,
                    g("attention.output.dense.weight").T, g("attention.output.dense.bias"),
                    g("attention.output.LayerNorm.weight"), g("attention.output.LayerNorm.bias"),
                    g("intermediate.dense.weight").T, g("intermediate.dense.bias"),
                    g("output.dense.weight").T, g("output.dense.bias"),
                    g("output.LayerNorm.weight"), g("output.LayerNorm.bias")))
        except KeyError as e:
            raise LLMError(f"{path}: the weights lack {e.args[0]} (not a BERT encoder of this shape)") from None
        if self.word.shape[1] != self.dim or self.dim % self.heads:
            raise LLMError(f"{path}: hidden size {self.word.shape[1]} does not fit config.json")
        self.tokenizer = Tokenizer.from_str(files["tokenizer.json"].decode("utf-8"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(min(self.max_tokens, self.pos.shape[0]))
        # the same pass as an onnxruntime graph when it can be built (recalld/model/onnxbert.py),
        # its weights int8 unless RECALLD_EMBED_RUNTIME says `float32`; `numpy` keeps the numpy pass
        self._session, self.runtime, self.runtime_reason = None, "numpy", None
        want = os.environ.get("RECALLD_EMBED_RUNTIME", "") or "int8"
        if want not in RUNTIMES:
            raise LLMError(f"RECALLD_EMBED_RUNTIME={want!r}: one of {', '.join(RUNTIMES)}")
        if want != "numpy":
            try:
                from recalld.model import onnxbert

                self._session = onnxbert.session(self, int(os.environ.get("RECALLD_EMBED_THREADS") or 1),
                                                 int8=want == "int8")
            except Exception as e:  # a broken onnxruntime: the numpy pass is the same arithmetic
                self.runtime_reason = f"{type(e).__name__}: {e}"[:300]
            if self._session is not None:
                self.runtime = "onnxruntime" if want == "float32" else "onnxruntime-int8"
                if want == "int8":  # other vectors: never compared with the float32 ones
                    self.model += "+int8"
                # The session holds its own copy of the weights; the numpy pass's would be a
                # second one that nothing reads (RECALLD_EMBED_RUNTIME=numpy loads them to run).
                self.word = self.pos = self.type0 = self.ln0 = self._weights = None
                self.layers = []
                onnxbert.trim()
            elif self.runtime_reason is None:
                self.runtime_reason = "onnxruntime or onnx not installed"

    def tokens(self, texts) -> list:
        """The word-piece ids of each text ([CLS] ... [SEP], cut at max_tokens)."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts))]

    def embed(self, texts, batch: int = BATCH) -> np.ndarray:
        """(len(texts), dim) float32, each row of unit length. Texts are run in batches of
        similar length, so padding costs little; the rows come back in the input's order."""
        texts = [t if isinstance(t, str) else str(t) for t in texts]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        ids = self.tokens(texts)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        chunk: list = []
        for i in order:  # ascending length, so the text just added is the chunk's longest
            if chunk and (len(chunk) >= batch or (len(chunk) + 1) * len(ids[i]) > BATCH_TOKENS):
                out[chunk] = self._forward([ids[j] for j in chunk])
                chunk = []
            chunk.append(i)
        if chunk:
            out[chunk] = self._forward([ids[j] for j in chunk])
        return out

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    def _forward(self, seqs: list) -> np.ndarray:
        b, n = len(seqs), max(len(s) for s in seqs)
        ids = np.zeros((b, n), dtype=np.int64)
        mask = np.zeros((b, n), dtype=np.float32)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = s
            mask[i, :len(s)] = 1.0
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        if self._session is not None:
            return self._session.run(["out"], {"ids": ids, "bias": bias, "mask": mask[:, :, None]})[0]
        x = self.word[ids] + self.pos[:n] + self.type0
        x = _layer_norm(x, *self.ln0).reshape(b * n, self.dim)
        h, dh = self.heads, self.dim // self.heads
        # padded keys get a large negative score (bias, above), so softmax gives them no weight
        scale = np.float32(1 / math.sqrt(dh))
        for (qkv_w, qkv_b, o_w, o_b, ln1_w, ln1_b, i_w, i_b, f_w, f_b, ln2_w, ln2_b) in self.layers:
            qkv = x @ qkv_w
            qkv += qkv_b  # in place: each temporary here is a whole batch's activation
            qkv = qkv.reshape(b, n, 3, h, dh)
            q = qkv[:, :, 0].transpose(0, 2, 1, 3)
            k = qkv[:, :, 1].transpose(0, 2, 3, 1)
            v = qkv[:, :, 2].transpose(0, 2, 1, 3)
            att = (q @ k) * scale + bias
            att -= att.max(-1, keepdims=True)
            np.exp(att, out=att)
            att /= att.sum(-1, keepdims=True)
            ctx = (att @ v).transpose(0, 2, 1, 3).reshape(b * n, self.dim)
            y = ctx @ o_w
            y += o_b
            y += x
            x = _layer_norm(y, ln1_w, ln1_b)
            up = x @ i_w
            up += i_b
            y = _gelu_(up) @ f_w
            del up
            y += f_b
            y += x
            x = _layer_norm(y, ln2_w, ln2_b)
        x = x.reshape(b, n, self.dim)
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1.0)
        norm = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norm, 1e-12)).astype(np.float32)


_LOADED: dict = {}
_LOCK = threading.Lock()


def load(choice: "resolve.ModelChoice") -> Encoder:
    """The encoder of a resolved bundle, loaded once per process."""
    if not choice.available:
        raise Unavailable(choice.reason or "no embedder")
    with _LOCK:
        enc = _LOADED.get(choice.path)
        if enc is None:
            try:
                enc = Encoder(choice.path, choice.source)
            except ImportError as e:
                raise Unavailable(f"the embedder needs the tokenizers package ({e})") from None
            except (OSError, ValueError, zipfile.BadZipFile) as e:
                raise LLMError(f"{choice.path}: cannot load the embedder ({type(e).__name__}: {e})") from None
            _LOADED[choice.path] = enc
        return enc


def require(cfg: "dict | None" = None) -> Encoder:
    """The configured embedder, loaded; Unavailable (with the reason) when there is none."""
    return load(resolve.resolve_embedder(cfg))
