"""Query likelihood: how much a memory helps a small language model predict the need.

Both the judge (recalld.judge.judge: does it pass?) and the re-ranker (recalld.judge.rerank:
in which order?) read the same numbers, from one decode per candidate:

    gain of each need token = log P(token | memory, tokens before) - log P(token | no memory, ...)
    judge_score = the mean gain over the need's tokens

A memory that answers the need makes its words predictable (names, places, the error text);
an unrelated memory does not, and the per-token average keeps long and short needs on one
scale. The "no memory" baseline is computed once per need; every candidate costs one decode of
its memory plus the need.
"""

import time

from recalld.model.errors import LLMTimeout

MAX_MEMORY_CHARS = 1500  # a memory longer than this is judged on its head
MAX_NEED_CHARS = 400  # a long need is judged on its tail (the latest reasoning or error); its tokens
# are decoded once per candidate, so this bounds the cost of a pass

# The same frame with and without the memory, so the difference isolates what the memory adds.
WITH_MEMORY = "Note: {memory}\nQuestion:"
WITHOUT_MEMORY = "Note: (none)\nQuestion:"
# Measured and not kept (docs/evaluation.md, "The judge's features and fits"): asking the model
# "does the note answer the question?" and comparing log P(yes) with log P(no) after the same frame.
YES_NO = "\nDoes the note answer the question (yes or no)? Answer:"


def clip_memory(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MEMORY_CHARS else text[:MAX_MEMORY_CHARS] + " ..."


def clip_need(need: str) -> str:
    need = " ".join(need.split())
    return need if len(need) <= MAX_NEED_CHARS else need[-MAX_NEED_CHARS:]


def need_continuation(need: str) -> str:
    """The need as the model reads it after the frame (clipped, one leading space)."""
    return " " + clip_need(need)


def token_gains(runtime, need: str, texts: list, deadline: "float | None" = None) -> list:
    """For each memory text, how much it raises the log-probability of each of the need's tokens
    (the tokens of `need_continuation(need)`; None for a text the deadline cut off). Their mean
    is the judge score; recalld.judge.rerank reads them word by word.

    Raises LLMTimeout only if not even the baseline fitted; a partial run returns Nones."""
    need_c = need_continuation(need)

    def left():
        return None if deadline is None else max(0.05, deadline - time.monotonic())

    base = runtime.token_logprobs(WITHOUT_MEMORY, need_c, timeout_s=left())
    out = []
    for t in texts:
        if deadline is not None and time.monotonic() >= deadline:
            out.append(None)
            continue
        try:
            lps = runtime.token_logprobs(WITH_MEMORY.format(memory=clip_memory(t)), need_c, timeout_s=left())
        except LLMTimeout:
            out.append(None)
            continue
        out.append([a - b for a, b in zip(lps, base)])
    return out
