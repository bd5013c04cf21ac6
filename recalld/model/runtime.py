"""The local model runtime: loading a GGUF once per process and running it safely.

One `Runtime` per model file per process, shared by every role that resolves to it
(recalld.model.resolve says which file a role uses). All inference for that model runs on one
worker thread (which is the lock: llama.cpp contexts are not thread-safe); callers wait with a
time limit and get `LLMTimeout`, and the work itself checks the same deadline between batches
and tokens, so an abandoned call stops early instead of holding the model. Output is
deterministic: greedy decoding (temperature 0), fixed seed.

llama_cpp is imported only when a model is loaded (never on the hook's path). A process that
runs its models in worker processes (the daemon: recalld.daemon.models) installs a provider with
`use_provider`; from then on `require_runtime` answers from the provider and this process never
loads a model itself, so no native fault in one can end it.
"""

import importlib.util
import itertools
import json
import math
import os
import queue
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from recalld.model.errors import LLMError, LLMPreempted, LLMTimeout, Unavailable
from recalld.model.resolve import resolve

SEED = 20240611
# Judge prompts are a memory (cut to ~1,500 characters) plus a need (~600); the proposer reads
# a turn. 2,048 tokens covers both and keeps the KV cache small (~50 MB for a 135M model).
N_CTX = 2048
N_BATCH = 512
# One thread: llama.cpp's threads spin at barriers, so on a machine shared with the agent one
# descheduled thread stalls the other, and two threads were several times slower than one
# (docs/evaluation.md, "One thread for each model"). RECALLD_LLM_THREADS overrides it on a
# machine with cores to spare.
def _threads() -> int:
    try:
        return max(1, int(os.environ.get("RECALLD_LLM_THREADS", "1")))
    except ValueError:
        return 1


# ---------------------------------------------------------------- the worker (the lock)


class _Worker:
    """One daemon thread per model: every inference call runs here, one at a time.

    Urgent calls (likelihoods: the judge and the re-ranker, whose answer the agent's next step
    is waiting for) go before queued background calls (the proposer's generation), and a
    running generation yields to them: it stops at its next token (LLMPreempted) when an
    urgent call is waiting. Without that, a judge pass could wait out a whole draft."""

    def __init__(self, name: str):
        self._q: queue.PriorityQueue = queue.PriorityQueue()
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self.urgent_waiting = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self):
        while True:
            _prio, _n, item = self._q.get()
            if item is None:
                return
            fn, deadline, fut, urgent = item
            if urgent:
                with self._lock:
                    self.urgent_waiting -= 1
            if not fut.set_running_or_notify_cancel():
                continue
            if deadline is not None and time.monotonic() > deadline:
                fut.set_exception(LLMTimeout("timed out while waiting for the model"))
                continue
            try:
                fut.set_result(fn(deadline))
            except BaseException as e:  # handed to the caller, never kills the worker
                fut.set_exception(e)

    def submit(self, fn, timeout_s: "float | None", urgent: bool = False) -> Future:
        """Queue `fn(deadline)`; its Future is settled on this worker's thread. A call still
        queued at its deadline never runs (LLMTimeout); a running one checks the deadline."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        fut: Future = Future()
        if urgent:
            with self._lock:
                self.urgent_waiting += 1
        self._q.put((0 if urgent else 1, next(self._seq), (fn, deadline, fut, urgent)))
        return fut

    def call(self, fn, timeout_s: "float | None", urgent: bool = False):
        fut = self.submit(fn, timeout_s, urgent)
        try:
            return fut.result(timeout=timeout_s)
        except FutureTimeout:
            fut.cancel()  # if still queued, it never runs; if running, it stops at its next check
            raise LLMTimeout(f"model call exceeded {timeout_s:g} s") from None

    def stop(self, wait_s: float = 5.0):
        self._q.put((2, next(self._seq), None))  # after what is already queued
        if self._thread is not threading.current_thread():
            self._thread.join(wait_s)


def _check(deadline: "float | None") -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise LLMTimeout("model call ran past its deadline")


# ---------------------------------------------------------------- the runtime


class Runtime:
    """One loaded GGUF. Thread-safe: every call goes through the model's single worker."""

    def __init__(self, model_path: str, *, n_ctx: int = N_CTX, n_threads: "int | None" = None,
                 seed: int = SEED):
        n_threads = n_threads or _threads()
        self.model_path = str(model_path)
        self.n_ctx = n_ctx
        self.seed = seed
        self.n_threads = n_threads
        self._worker = _Worker(f"recalld-llm:{Path(model_path).name}")
        self._grammars: dict = {}
        self.calls = 0
        self.model_ms = 0.0  # time spent inside inference, all calls
        t0 = time.perf_counter()
        try:
            self._llm = self._worker.call(lambda _d: self._load(n_ctx, n_threads, seed), None)
        except BaseException:
            self._worker.stop()
            raise
        self.load_ms = (time.perf_counter() - t0) * 1000

    def _load(self, n_ctx, n_threads, seed):
        if _PROVIDER is not None:
            raise LLMError("this process runs its models in worker processes; it never loads one itself")
        import llama_cpp
        from llama_cpp import Llama

        try:  # llama.cpp's own log lines; verbose=False alone does not silence model loading
            import llama_cpp._logger as _logger
            import logging

            _logger.logger.setLevel(logging.CRITICAL)
        except Exception:
            pass
        try:
            llm = Llama(model_path=self.model_path, n_ctx=n_ctx, n_batch=N_BATCH, n_ubatch=N_BATCH,
                        n_threads=n_threads, n_threads_batch=n_threads, seed=seed,
                        logits_all=False, verbose=False)
        except Exception as e:
            raise LLMError(f"cannot load {self.model_path}: {e}") from e
        from llama_cpp import _internals

        self._batch = _internals.LlamaBatch(n_tokens=N_BATCH, embd=0, n_seq_max=1, verbose=False)
        self._n_vocab = llm.n_vocab()
        self._get_logits_ith = llama_cpp.llama_get_logits_ith
        return llm

    @property
    def name(self) -> str:
        return Path(self.model_path).name

    def _timed(self, fn):
        def timed(deadline):
            t0 = time.perf_counter()
            try:
                return fn(deadline)
            finally:
                self.model_ms += (time.perf_counter() - t0) * 1000
                self.calls += 1

        return timed

    def _run(self, fn, timeout_s, urgent: bool = False):
        return self._worker.call(self._timed(fn), timeout_s, urgent)

    def _sync(self, plan: tuple):
        fn, timeout_s, urgent, finish = plan
        out = self._run(fn, timeout_s, urgent)
        return out if finish is None else finish(out)

    # The calls that use the model's context, as (work on the inference thread, time limit,
    # urgent, what turns its result into the call's answer); the methods run them and wait,
    # submit runs them without a waiting thread.
    SUBMITTED = ("token_logprobs", "logliks", "generate_json")

    def submit(self, method: str, args: list, kwargs: dict, done) -> None:
        """Start `method` (one of SUBMITTED) and return at once; `done(answer, None)` or
        `done(None, exception)` is called once, on the inference thread, when it ends. The
        model worker answers its calls this way, so no thread is started per call only to wait
        for the inference: that cost a thread start and two more wake-ups per call, each a wait
        for a CPU when the machine is busy. A call queued past its deadline never runs and a
        running one checks it, as with the waiting methods; one stuck in native code is the
        caller's to give up on (the daemon kills the worker). Errors in `args` raise here."""
        if method not in self.SUBMITTED:
            raise ValueError(f"{method} is not a call that can be submitted")
        fn, timeout_s, urgent, finish = getattr(self, "_plan_" + method)(*args, **kwargs)

        def settle(fut):
            try:
                out = fut.result()
                out = out if finish is None else finish(out)
            except BaseException as e:  # handed to done, like call hands it to its caller
                done(None, e)
                return
            done(out, None)

        self._worker.submit(self._timed(fn), timeout_s, urgent).add_done_callback(settle)

    # ------------------------------------------------------------ tokens

    def tokenize(self, text: str, bos: bool = False) -> list:
        # Tokenizing is pure (no context state), so it does not need the worker.
        return self._llm.tokenize(text.encode("utf-8"), add_bos=bos, special=False)

    def pieces(self, text: str) -> list:
        """The text of each token of `text` (as `tokenize` splits it), for mapping per-token
        scores back to words. A piece that ends inside a multi-byte character is decoded with
        a replacement character: only its letters and spaces are used."""
        return [self._llm.detokenize([t]).decode("utf-8", "replace") for t in self.tokenize(text)]

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    # ------------------------------------------------------------ likelihood

    def token_logprobs(self, context: str, continuation: str, timeout_s: "float | None" = 30.0) -> list:
        """log P of each continuation token given the context and the tokens before it."""
        return self._sync(self._plan_token_logprobs(context, continuation, timeout_s))

    def _plan_token_logprobs(self, context: str, continuation: str, timeout_s: "float | None" = 30.0) -> tuple:
        ctx = self.tokenize(context, bos=True)
        cont = self.tokenize(continuation)
        return (lambda d: self._token_logprobs(ctx, cont, d)), timeout_s, True, None

    def logliks(self, context: str, continuations: list, timeout_s: "float | None" = 30.0) -> list:
        """(sum of log P(continuation tokens | context), number of continuation tokens) for
        several continuations of one context (the context is decoded once)."""
        return self._sync(self._plan_logliks(context, continuations, timeout_s))

    def _plan_logliks(self, context: str, continuations: list, timeout_s: "float | None" = 30.0) -> tuple:
        ctx = self.tokenize(context, bos=True)
        conts = [self.tokenize(c) for c in continuations]
        return ((lambda d: [self._token_logprobs(ctx, c, d) for c in conts]), timeout_s, True,
                lambda out: [(float(sum(lps)), len(lps)) for lps in out])

    def _token_logprobs(self, ctx: list, cont: list, deadline) -> list:
        import numpy as np

        if not cont:
            return []
        if not ctx:
            raise LLMError("empty context (the model adds no BOS token)")
        toks = list(ctx) + list(cont)
        if len(toks) > self.n_ctx:
            raise LLMError(f"{len(toks)} tokens do not fit the {self.n_ctx}-token context")
        llm = self._llm
        # Reuse the KV cache for the prefix this sequence shares with the previous one (the
        # judge's header, the memory when several needs are scored against it), but always
        # decode from the last context token: its logits predict the first continuation token.
        cached = llm.input_ids[: llm.n_tokens].tolist()
        common = 0
        for a, b in zip(cached, toks):
            if a != b:
                break
            common += 1
        n_past = min(common, len(ctx) - 1)
        llm._ctx.kv_cache_seq_rm(-1, n_past, -1)
        llm.n_tokens = n_past
        llm._requires_eval = True
        first_needed = len(ctx) - 1  # position whose logits predict cont[0]
        out = []
        b = self._batch.batch
        pos = n_past
        while pos < len(toks):
            _check(deadline)
            chunk = toks[pos: pos + N_BATCH]
            b.n_tokens = len(chunk)
            want = []
            for i, t in enumerate(chunk):
                p = pos + i
                b.token[i] = t
                b.pos[i] = p
                b.seq_id[i][0] = 0
                b.n_seq_id[i] = 1
                need = first_needed <= p < len(toks) - 1
                b.logits[i] = need
                if need:
                    want.append(i)
            llm._ctx.decode(self._batch)
            llm.input_ids[pos: pos + len(chunk)] = chunk
            llm.n_tokens = pos + len(chunk)
            for i in want:
                row = np.ctypeslib.as_array(self._get_logits_ith(llm._ctx.ctx, i), shape=(self._n_vocab,))
                m = float(row.max())
                lse = m + math.log(float(np.exp(row - m).sum()))
                out.append(float(row[toks[pos + i + 1]]) - lse)
            pos += len(chunk)
        return out

    # ------------------------------------------------------------ generation

    def _grammar(self, schema: dict):
        from llama_cpp import LlamaGrammar

        key = json.dumps(schema, sort_keys=True)
        g = self._grammars.get(key)
        if g is None:
            g = self._grammars[key] = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
        return g

    def generate_json(self, prompt: str, schema: dict, max_tokens: int = 256,
                      timeout_s: "float | None" = 20.0, system: "str | None" = None,
                      yield_to_urgent: bool = True):
        """Grammar-constrained JSON matching `schema` (greedy, fixed seed). `prompt` is the
        user message; the model's own chat template wraps it. A background call: it waits
        behind urgent ones and, with yield_to_urgent, stops for them (LLMPreempted)."""
        return self._sync(self._plan_generate_json(prompt, schema, max_tokens, timeout_s, system, yield_to_urgent))

    def _plan_generate_json(self, prompt: str, schema: dict, max_tokens: int = 256,
                            timeout_s: "float | None" = 20.0, system: "str | None" = None,
                            yield_to_urgent: bool = True) -> tuple:
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt}]

        def work(deadline):
            from llama_cpp import StoppingCriteriaList

            # A stopping criterion, not a logits processor: llama.cpp calls logits processors
            # from a C callback that swallows exceptions, so a deadline raised there would
            # not stop the generation.
            late, preempted = [], []

            def past_deadline(_ids, _logits) -> bool:
                if deadline is not None and time.monotonic() > deadline:
                    late.append(True)
                    return True
                if yield_to_urgent and self._worker.urgent_waiting > 0:
                    preempted.append(True)
                    return True
                return False

            text, stop = self._chat_prompt(messages)
            out = self._llm.create_completion(
                text, grammar=self._grammar(schema), temperature=0.0, top_k=1, seed=self.seed,
                max_tokens=max_tokens, stop=stop, stopping_criteria=StoppingCriteriaList([past_deadline]))
            if late:
                raise LLMTimeout("generation ran past its deadline")
            if preempted:
                raise LLMPreempted("generation stopped for an urgent call (the judge)")
            return out["choices"][0]["text"], out["choices"][0].get("finish_reason")

        def parse(out):
            text, finish = out
            try:
                return json.loads(text)
            except ValueError:
                why = "it hit max_tokens" if finish == "length" else "the output does not parse"
                raise LLMError(f"model output is not complete JSON ({why}): {text[:200]!r}") from None

        return work, timeout_s, False, parse

    def _chat_prompt(self, messages: list) -> tuple:
        """The prompt in the model's own chat template (from the GGUF metadata), with its stop
        strings; plain text for a model without a template."""
        tmpl = (self._llm.metadata or {}).get("tokenizer.chat_template")
        if not tmpl:
            return "\n\n".join(m["content"] for m in messages) + "\n", None
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        def tok_text(t):
            return self._llm._model.token_get_text(t) if t != -1 else ""

        fmt = Jinja2ChatFormatter(template=tmpl, eos_token=tok_text(self._llm.token_eos()),
                                  bos_token=tok_text(self._llm.token_bos()))
        r = fmt(messages=messages)
        return r.prompt, r.stop

    def close(self):
        def free(_d):
            self._llm.close() if hasattr(self._llm, "close") else None
            self._batch.close()

        try:
            self._worker.call(free, 10)
        finally:
            self._worker.stop()


# ---------------------------------------------------------------- the shared registry

_RUNTIMES: dict = {}  # realpath -> Runtime
_FAILED: dict = {}  # (realpath, size, mtime) -> error message, so a broken file is not reloaded every pass
_LOAD_LOCK = threading.Lock()
_PROVIDER = None  # what runs this process's models elsewhere (recalld.daemon.models.Models)


def use_provider(provider) -> None:
    """Route require_runtime and loaded() to `provider` (None: back to loading in-process)."""
    global _PROVIDER
    _PROVIDER = provider


def require_runtime(role: str = "judge", cfg: "dict | None" = None) -> Runtime:
    """The loaded runtime for `role`, loading it on first use; raises Unavailable with the reason."""
    if _PROVIDER is not None:
        return _PROVIDER.runtime(role, cfg)
    choice = resolve(role, cfg)
    if not choice.available:
        raise Unavailable(choice.reason)
    key = choice.path
    with _LOAD_LOCK:
        rt = _RUNTIMES.get(key)
        if rt is not None:
            return rt
        st = os.stat(key)
        fkey = (key, st.st_size, st.st_mtime_ns)
        if fkey in _FAILED:
            raise Unavailable(_FAILED[fkey])
        if importlib.util.find_spec("llama_cpp") is None:
            raise Unavailable("llama-cpp-python is not installed (pip install llama-cpp-python)")
        try:
            rt = Runtime(key)
        except Exception as e:
            _FAILED[fkey] = f"model {key} failed to load: {e}"
            raise Unavailable(_FAILED[fkey]) from e
        _RUNTIMES[key] = rt
        return rt


def loaded() -> list:
    if _PROVIDER is not None:
        return _PROVIDER.loaded()
    return list(_RUNTIMES.values())


def shutdown() -> None:
    """Free every loaded model and stop its worker (daemon shutdown, tests)."""
    with _LOAD_LOCK:
        rts = list(_RUNTIMES.values())
        _RUNTIMES.clear()
        _FAILED.clear()
    for rt in rts:
        try:
            rt.close()
        except Exception:
            pass
