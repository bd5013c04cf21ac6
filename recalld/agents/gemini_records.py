"""Gemini CLI chat records -> events (the format: recalld/agents/gemini.py's docstring).

A module of its own so that the hook, which imports every adapter on every run, does not load a
parser it never calls; the daemon imports it with its first Gemini chat.
"""

import os

from recalld.agents.base import event as _ev, strip_injected, text_of as _str, tool_summary
from recalld.core import jsonio

_INJECTED = ("<session_context>",)


# --- chats --------------------------------------------------------------------------------------


def _project_root(source: str) -> "str | None":
    """The cwd a chat belongs to: `<project dir>/.project_root`, beside `chats/`."""
    try:
        with open(os.path.join(os.path.dirname(os.path.dirname(source)), ".project_root"), encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _parts(content) -> list:
    if isinstance(content, str):
        return [{"text": content}]
    return [p for p in content if isinstance(p, dict)] if isinstance(content, list) else []


def _prompt_text(parts: list) -> str:
    out = []
    for p in parts:
        text = _str(p.get("text"))
        if text.strip() and not text.lstrip().startswith(_INJECTED):
            text = strip_injected(text)
            if text:
                out.append(text)
    return "\n".join(out)


def _result_text(response) -> tuple:
    if not isinstance(response, dict):
        return _str(response), False
    text = response.get("output") if "output" in response else response.get("error", response.get("content"))
    if not isinstance(text, str):
        text = jsonio.dumps(response, ensure_ascii=False)[:4000]
    return text, "error" in response


def _tool_result(st, call_id: str, name, response, failed: bool, time) -> list:
    key = "result:" + call_id
    if not call_id or key in st.seen:
        return []
    st.seen.add(key)
    text, err = _result_text(response)
    return [_ev(st, "tool", "tool_result", text, tool=name or st.tool_names.get(call_id), is_error=err or failed,
                time=time)]


def parse_record(o: dict, st) -> list:
    """One decoded chat record -> events (raises on a known type with a bad shape)."""
    if st.cwd is None and st.source:
        st.cwd = _project_root(st.source)
    if isinstance(o.get("sessionId"), str) and o["sessionId"] and "projectHash" in o:
        st.session = o["sessionId"]
        return []
    if "$set" in o or "$rewindTo" in o:
        return []  # metadata, and Gemini's own environment block; a rewind keeps what was said
    mid = o.get("id")
    if not isinstance(mid, str) or not mid:
        return []
    t = o.get("type")
    time = _str(o.get("timestamp")) or None
    out: list = []
    if t == "user":
        parts = _parts(o.get("content"))
        for p in parts:
            fr = p.get("functionResponse")
            if isinstance(fr, dict):
                out += _tool_result(st, _str(fr.get("id")), _str(fr.get("name")) or None, fr.get("response"),
                                    False, time)
        if ("prompt:" + mid) not in st.seen:
            text = _prompt_text(parts)
            if text:
                st.seen.add("prompt:" + mid)
                if st.agent in st.open_turns:
                    out.append(_ev(st, "system", "turn_end", "", time=time))
                out.append(_ev(st, "user", "prompt", text, time=time, uuid=mid))
        return out
    if t != "gemini":
        return []  # info, error, warning: the CLI's own lines
    for i, th in enumerate(o.get("thoughts") or []):
        key = f"thought:{mid}:{i}"
        if isinstance(th, dict) and key not in st.seen:
            st.seen.add(key)
            text = "\n".join(x for x in (_str(th.get("subject")), _str(th.get("description"))) if x.strip())
            if text.strip():
                out.append(_ev(st, "assistant", "reasoning", text, time=time, uuid=mid))
    text = "\n".join(_str(p.get("text")) for p in _parts(o.get("content")) if _str(p.get("text")).strip())
    if text.strip() and ("text:" + mid) not in st.seen:
        st.seen.add("text:" + mid)
        out.append(_ev(st, "assistant", "text", text, time=time, uuid=mid))
    for call in o.get("toolCalls") or []:
        if not isinstance(call, dict):
            continue
        cid, name = _str(call.get("id")), _str(call.get("name")) or None
        args = call.get("args") if isinstance(call.get("args"), dict) else {}
        if cid and ("call:" + cid) not in st.seen:
            st.seen.add("call:" + cid)
            if name:
                st.tool_names[cid] = name
            out.append(_ev(st, "assistant", "tool_call", tool_summary(name or "", args), tool=name,
                           tool_input=args, time=_str(call.get("timestamp")) or time))
        for r in call.get("result") or []:
            fr = r.get("functionResponse") if isinstance(r, dict) else None
            if isinstance(fr, dict):
                out += _tool_result(st, cid or _str(fr.get("id")), name, fr.get("response"),
                                    call.get("status") == "error", _str(call.get("timestamp")) or time)
    return out
