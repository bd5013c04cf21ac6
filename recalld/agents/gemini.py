"""Gemini CLI: hooks and MCP servers in one settings.json, handler timeouts in milliseconds,
chats under ~/.gemini/tmp (facts from Gemini CLI's hook documentation and files the real
Gemini CLI 0.61.0 wrote in the end-to-end tests).

Chats: `~/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl` (`GEMINI_CLI_HOME` replaces
the home directory), the project directory named in `~/.gemini/projects.json` and in
`<project>/.project_root`, which holds the cwd (the records do not). The first line is the
session's metadata (`sessionId`, `projectHash`, `startTime`, `kind`); then message records
(`id`, `timestamp`, `type` user | gemini | info | error, `content`: parts or a string,
`thoughts`, `toolCalls` with their `result`), `{"$set": {...}}` metadata updates and
`{"$rewindTo": id}`. A message is written again, whole, each time it grows (a gemini turn
first without its toolCalls, then with them), so the parser remembers what it has emitted per
message id. No record marks a turn's end: the next prompt closes it (the AfterAgent hook is
the turn boundary recalld's proposer reads).
"""

import os

from recalld.agents.base import BY_EVENT_NAME, NOT_MINE, Adapter
from recalld.core import jsonio

# Its native events that neither Claude Code nor Codex uses: one of them names the agent.
DETECT_EVENTS = frozenset({"BeforeAgent", "AfterAgent", "BeforeTool", "AfterTool", "BeforeModel",
                           "AfterModel", "BeforeToolSelection", "PreCompress"})
# Prompt parts Gemini CLI writes itself: its environment block and hook context.
TRUSTED_LEVELS = ("TRUST_FOLDER", "TRUST_PARENT")


def gemini_dir() -> str:
    home = os.environ.get("GEMINI_CLI_HOME") or os.path.expanduser("~")
    return os.path.join(home, ".gemini")


class Gemini(Adapter):
    name = "gemini"
    install_name = "gemini"
    shell_markers = ("GEMINI_CLI",)
    known_events = DETECT_EVENTS | {"SessionStart", "SessionEnd", "Notification"}
    events = (("SessionStart", "session-start"), ("BeforeAgent", "prompt-submit"),
              ("BeforeTool", "pre-tool"), ("AfterTool", "post-tool"), ("AfterAgent", "stop"))
    bash_tools = frozenset({"run_shell_command"})
    write_tools = frozenset({"write_file", "replace"})
    pre_tool_matcher = "run_shell_command|write_file|replace"
    hook_flag = "gemini"
    mcp_format = "json"
    # Older Gemini CLI releases keep these switches inside `hooks`, next to the events.
    hooks_config_keys = ("enabled", "disabled", "notifications")
    # Observed in 0.61.0: SessionStart context reaches the model (in -p runs prefixed to the
    # prompt), BeforeAgent context is appended to the user turn, AfterTool context to the
    # tool's result. BeforeTool ignores additionalContext, and so does AfterAgent.
    context_events = frozenset({"session-start", "prompt-submit", "post-tool"})
    # BeforeTool's {"decision": "deny"} stops the call; the reason arrives as its error.
    gate_events = frozenset({"pre-tool"})

    def detect(self, payload):
        return BY_EVENT_NAME if payload.get("hook_event_name") in DETECT_EVENTS else NOT_MINE

    def settings_files(self, scope, root):
        base = os.path.join(root, ".gemini") if scope == "project" else gemini_dir()
        path = os.path.join(base, "settings.json")
        return path, path

    def hook_handler(self, command, event, timeout_s):
        # Gemini CLI counts handler timeouts in milliseconds.
        return {"name": f"recalld-{event}", "type": "command", "command": command, "timeout": timeout_s * 1000}

    def gate_output(self, native_event, reason):
        return jsonio.dumps({"decision": "deny", "reason": reason}, ensure_ascii=False) + "\n"

    def stop_text(self, payload):
        # AfterAgent sends the turn's answer as `prompt_response` (observed).
        return payload.get("prompt_response") or payload.get("last_assistant_message")

    def install_notes(self, scope, hooks_file, hooks_data):
        d = hooks_data or {}
        notes = ["Gemini CLI loads hooks only in a trusted folder: trust the project when Gemini asks "
                 "(or add it to ~/.gemini/trustedFolders.json); `recalld doctor --cwd DIR` checks it."]
        if (d.get("hooksConfig") or {}).get("enabled") is False or (d.get("hooks") or {}).get("enabled") is False:
            notes.append(f"hooks are disabled in {hooks_file} (hooksConfig.enabled = false); recalld "
                         "left that setting alone")
        return notes

    def transcript_roots(self):
        return [os.path.join(gemini_dir(), "tmp")]

    def owns_transcript(self, path, first):
        if isinstance(first, dict) and "projectHash" in first:
            return True
        return "/.gemini/tmp/" in path.replace(os.sep, "/")

    def parse_record(self, o, st):
        from recalld.agents.gemini_records import parse_record  # not on the hook's import path

        return parse_record(o, st)


def folder_trust(cwd: str, settings: "dict | None" = None) -> tuple:
    """(trusted: True | False | None, why) for a folder, by Gemini CLI 0.61's rules: the
    GEMINI_CLI_TRUST_WORKSPACE switch, `security.folderTrust.enabled` (default on), then the
    longest rule in trustedFolders.json that covers the folder (TRUST_PARENT covers the rule's
    parent). None: no rule covers it, and Gemini asks (a `-p` run exits instead)."""
    if os.environ.get("GEMINI_CLI_TRUST_WORKSPACE") == "false":
        return False, "distrusted by GEMINI_CLI_TRUST_WORKSPACE=false"
    if os.environ.get("GEMINI_CLI_TRUST_WORKSPACE") == "true":
        return True, "GEMINI_CLI_TRUST_WORKSPACE=true"
    ft = ((settings or {}).get("security") or {}).get("folderTrust")
    if isinstance(ft, dict) and ft.get("enabled") is False:
        return True, "folder trust is off (security.folderTrust.enabled = false)"
    path = os.environ.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH") or os.path.join(gemini_dir(), "trustedFolders.json")
    try:
        with open(path, encoding="utf-8") as f:
            rules = jsonio.loads(f.read())
    except FileNotFoundError:
        rules = {}
    except (OSError, ValueError) as e:
        return False, f"not checked: {path} cannot be read ({e}), and Gemini CLI refuses to start"
    if not isinstance(rules, dict):
        rules = {}
    here = os.path.realpath(cwd)
    best, level = -1, None
    for rule, lvl in rules.items():
        base = os.path.dirname(rule) if lvl == "TRUST_PARENT" else rule
        base = os.path.realpath(base)
        if (here == base or here.startswith(base.rstrip(os.sep) + os.sep)) and len(rule) > best:
            best, level = len(rule), lvl
    if level in TRUSTED_LEVELS:
        return True, f"trusted in {path}"
    if level == "DO_NOT_TRUST":
        return False, f"marked DO_NOT_TRUST in {path}"
    return None, f"not in {path}"


ADAPTER = Gemini()


def __getattr__(name):
    # The transcript parser lives in gemini_records.py: the hook imports this module
    # on every run and never parses a transcript. Its old names still resolve here.
    if name in ('_INJECTED', 'parse_record', '_project_root', '_parts', '_prompt_text', '_result_text', '_tool_result'):
        from recalld.agents import gemini_records

        return getattr(gemini_records, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
