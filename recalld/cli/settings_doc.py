"""The settings reference: every setting as recalld.core.settings.SETTINGS declares it, and the
environment variables recalld reads. The source of docs/settings.md and `recalld config keys`;
tests/test_docs.py fails when the page is out of date or a variable the package reads is not here.
"""

# The environment variables recalld reads, for the same page.
ENVIRONMENT: dict = {
    "RECALLD_HOME": "Where recalld keeps its store, settings, receipts and sockets (default $XDG_DATA_HOME/recalld, else ~/.local/share/recalld).",
    "RECALLD_AGENT": "The agent identity the process runs as (default \"main\"): its agent-scoped memories and crystals.",
    "RECALLD_SUBAGENT": "Outside a hook: the subagent type whose identity CLI writes and MCP calls use, as its hooks do.",
    "RECALLD_DEADLINE_MS": "Overrides the setting deadline_ms for this process (a bad value is ignored and the receipt says so).",
    "RECALLD_MODEL": "A GGUF file for the judge and the proposer when models.<role> is not set; \"off\" disables both.",
    "RECALLD_LLM_THREADS": "Threads a language model decodes on (default 1).",
    "RECALLD_EMBED_THREADS": "Threads for the embedder: BLAS threads of the numpy pass, intra-op threads of the onnxruntime one (default 1).",
    "RECALLD_EMBED_RUNTIME": "The embedder's forward pass: `int8` (the default: an onnxruntime graph whose dense layers run in 8-bit integers, vectors named `MODEL+int8`), `float32` (the same graph in float32) or `numpy` (float32, without onnxruntime). Vectors of another pass are embedded again, never mixed (docs/embeddings.md).",
    "RECALLD_TEST_FAKE_MODEL": "Tests only: a file whose word (ok, sigill, sigsegv, sigkill, hang, garbage; :load to do it while loading) makes the model worker run a fake model that behaves so (recalld/model/fake.py).",
    "RECALLD_CODEX": "The codex binary `recalld install codex` trusts the hooks with (default: codex on PATH).",
}


def keys() -> list:
    """[{key, type, default, meaning}] for every setting, in the order SETTINGS declares them."""
    from recalld.core import settings

    return [{"key": s.key, "type": settings.expected(s.key, s.default), "default": s.default, "meaning": s.meaning}
            for s in settings.SETTINGS]
