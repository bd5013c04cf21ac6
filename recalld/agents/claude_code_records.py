"""Claude Code transcript records -> events (the format: recalld/agents/claude_code.py's docstring).

A module of its own so that the hook, which imports every adapter on every run, does not load a
parser it never calls; the daemon imports it with its first Claude Code transcript.
"""

from recalld.agents.base import event as _ev, exit_code_error, text_of as _str, tool_summary

TURN_END_SUBTYPES = {"turn_duration", "stop_hook_summary"}


def _block_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for b in content:
            if isinstance(b, dict) and b.get("type") == "text":
                out.append(_str(b.get("text")))
            elif isinstance(b, str):
                out.append(b)
        return "\n".join(o for o in out if o)
    return ""


def _queued(o: dict, st, kw: dict) -> list:
    """A message the user typed while the agent worked. Taken into the running turn
    (`remove`), it is the user speaking mid-turn: a prompt event, with no turn end before it."""
    op = o.get("operation")
    if op == "enqueue":
        text = _block_text(o.get("content"))
        # A queued slash command ("/mcp") runs in the client; words go to the model.
        if text.strip() and not text.lstrip().startswith("/"):
            st.queued.append(text)
    elif op == "remove" and st.queued:
        return [_ev(st, "user", "prompt", st.queued.pop(0), **kw)]
    elif op == "dequeue" and st.queued:
        st.queued.pop(0)  # sent as the next prompt, which has its own record
    elif op == "popAll":
        st.queued.clear()  # taken back into the input box, unsent
    return []


def parse_record(o: dict, st) -> list:
    """One decoded transcript record -> events (raises on a known type with a bad shape)."""
    t = o.get("type")
    if isinstance(o.get("sessionId"), str) and o["sessionId"]:
        st.session = o["sessionId"]
    if isinstance(o.get("cwd"), str) and o["cwd"]:
        st.cwd = o["cwd"]
    time, uuid = _str(o.get("timestamp")) or None, _str(o.get("uuid")) or None
    agent = st.agent
    if o.get("isSidechain") and agent == "main":
        # a sidechain record inside the main file (older versions): keep it apart from "main"
        agent = f"agent-{o['agentId']}" if isinstance(o.get("agentId"), str) else "sidechain"
    kw = dict(time=time, uuid=uuid, agent=agent)

    if t == "queue-operation":
        return _queued(o, st, kw)
    if t == "system":
        if o.get("subtype") in TURN_END_SUBTYPES and agent in st.open_turns:
            return [_ev(st, "system", "turn_end", "", **kw)]
        return []
    if t not in ("user", "assistant"):
        return []  # progress, summary, file-history-snapshot, queue-operation...
    msg = o.get("message")
    if not isinstance(msg, dict):
        raise ValueError("message is not an object")
    content = msg.get("content")
    out: list = []

    if t == "user":
        meta = bool(o.get("isMeta"))
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for b in blocks:
            if not isinstance(b, dict):
                continue
            bt = b.get("type")
            if bt == "text":
                text = _str(b.get("text"))
                if not text.strip():
                    continue
                if meta:
                    out.append(_ev(st, "system", "text", text, **kw))
                    continue
                if agent in st.open_turns:
                    # Older versions write no turn-end record: a new prompt closes the turn.
                    out.append(_ev(st, "system", "turn_end", "", **kw))
                out.append(_ev(st, "user", "prompt", text, **kw))
            elif bt == "tool_result":
                tid = _str(b.get("tool_use_id"))
                text = _block_text(b.get("content"))
                tur = o.get("toolUseResult")
                err = b.get("is_error") is True or exit_code_error(text)
                if isinstance(tur, dict):
                    code = tur.get("exitCode", tur.get("exit_code"))
                    if isinstance(code, int) and code != 0:
                        err = True
                    if not text and isinstance(tur.get("stderr"), str):
                        text = tur["stderr"]
                out.append(_ev(st, "tool", "tool_result", text, tool=st.tool_names.get(tid),
                               is_error=err, **kw))
        return out

    # assistant
    for b in content if isinstance(content, list) else [{"type": "text", "text": _str(content)}]:
        if not isinstance(b, dict):
            continue
        bt = b.get("type")
        if bt == "text":
            text = _str(b.get("text"))
            if text.strip():
                out.append(_ev(st, "assistant", "text", text, **kw))
        elif bt == "thinking":
            text = _str(b.get("thinking"))
            if text.strip():
                out.append(_ev(st, "assistant", "reasoning", text, **kw))
        elif bt == "tool_use":
            name = _str(b.get("name")) or None
            ti = b.get("input") if isinstance(b.get("input"), dict) else None
            if isinstance(b.get("id"), str) and name:
                st.tool_names[b["id"]] = name
            out.append(_ev(st, "assistant", "tool_call", tool_summary(name or "", ti), tool=name,
                           tool_input=ti, **kw))
    if msg.get("stop_reason") == "end_turn" and agent in st.open_turns:
        out.append(_ev(st, "system", "turn_end", "", **kw))
    return out
