"""How each real client is set up and run headless against its stand-in, with the flags that
../shared/reference/agent-hooks.md ("Observed in the real clients") records, and telemetry and
update checks off through each client's documented switches."""

import json
import os

from e2e_harness import client_executable
from e2e_standins import Anthropic, Gemini, OpenAIResponses, Tool, ToolSearch, Until


class Client:
    name = ""          # the line in clients.txt
    install_as = ""    # `recalld install <this>`
    stand_in = None    # the model API's stand-in class
    ms_timeouts = False
    mcp_marker = ""    # in a request when the client offers recalld's search tool
    # Extra command-line flags that skip a client's own trust review of hooks (Codex only).
    trust_bypass: tuple = ()

    def executable(self) -> str:
        return client_executable(self.name)

    def prepare(self, sc) -> None:
        """What a user sets up before installing recalld (auth, folder trust)."""

    def settings_path(self, sc) -> str:
        raise NotImplementedError

    def argv(self, sc, stand_in, prompt: str, bypass_trust: bool) -> tuple:
        raise NotImplementedError

    def run(self, sc, stand_in, prompt: str, bypass_trust: bool = True):
        argv, env = self.argv(sc, stand_in, prompt, bypass_trust)
        return sc.run_client(argv, env)

    def shell(self, command: str) -> Tool:
        raise NotImplementedError

    def mcp_search(self, query: str) -> list:
        """Steps that call recalld's MCP `search`, once the client offers it."""
        return [Until(lambda body: self.mcp_marker in json.dumps(body), self.shell("sleep 1")),
                self._mcp_call("search", {"query": query})]

    def _mcp_call(self, tool: str, args: dict) -> Tool:
        raise NotImplementedError


class ClaudeCode(Client):
    name, install_as, stand_in = "claude", "claude-code", Anthropic
    mcp_marker = "mcp__recalld__search"  # listed among the deferred tools in the system text

    def settings_path(self, sc):
        return os.path.join(sc.home, ".claude", "settings.json")

    def argv(self, sc, stand_in, prompt, bypass_trust):
        env = {"ANTHROPIC_BASE_URL": stand_in.url, "ANTHROPIC_API_KEY": "sk-ant-e2e-stand-in",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
               "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1"}
        # As root --dangerously-skip-permissions is refused; --allowedTools lets the calls run.
        argv = [self.executable(), "-p", prompt, "--output-format", "json",
                "--allowedTools", "Bash,Write,Edit,mcp__recalld__search,mcp__recalld__show"]
        return argv, env

    def shell(self, command):
        return Tool("Bash", {"command": command, "description": "run a command"})

    def _mcp_call(self, tool, args):
        # Deferred tools can be called directly with the right arguments.
        return Tool(f"mcp__recalld__{tool}", args)


class Codex(Client):
    name, install_as, stand_in = "codex", "codex", OpenAIResponses
    mcp_marker = "mcp__recalld"  # the deferred namespace, listed in the developer text
    trust_bypass = ("--dangerously-bypass-hook-trust",)
    model = "gpt-5.5"  # in Codex's catalog: freeform apply_patch and unified exec tools

    def settings_path(self, sc):
        return os.path.join(sc.home, ".codex", "hooks.json")

    def argv(self, sc, stand_in, prompt, bypass_trust):
        provider = ('model_providers.e2e={name="e2e",base_url="%s/v1",wire_api="responses",'
                    'env_key="E2E_STAND_IN_KEY"}' % stand_in.url)
        argv = [self.executable(), "exec", "-c", "model_provider=e2e", "-c", provider,
                "-c", "check_for_update_on_startup=false", "-c", "analytics.enabled=false",
                "-m", self.model, "--dangerously-bypass-approvals-and-sandbox"]
        if bypass_trust:
            argv += list(self.trust_bypass)
        return argv + [prompt], {"E2E_STAND_IN_KEY": "sk-e2e-stand-in"}

    def shell(self, command):
        return Tool("exec_command", {"cmd": command})

    def mcp_search(self, query):
        # MCP tools are deferred: the model loads them with tool_search, then calls them by
        # namespace.
        return [Until(lambda body: self.mcp_marker in json.dumps(body), self.shell("sleep 1")),
                ToolSearch("recalld search memories"),
                self._mcp_call("search", {"query": query})]

    def _mcp_call(self, tool, args):
        return Tool(tool, args, extra={"namespace": "mcp__recalld"})


class GeminiCli(Client):
    name, install_as, stand_in = "gemini", "gemini", Gemini
    ms_timeouts = True
    mcp_marker = "mcp_recalld_search"  # a function declaration in every request
    model = "gemini-2.5-pro"  # a fixed model: no routing side call

    def settings_path(self, sc):
        return os.path.join(sc.home, ".gemini", "settings.json")

    def prepare(self, sc):
        d = os.path.join(sc.home, ".gemini")
        os.makedirs(d, exist_ok=True)
        settings = {"security": {"auth": {"selectedType": "gemini-api-key"}},
                    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
                    "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False}}
        with open(self.settings_path(sc), "w", encoding="utf-8") as f:
            json.dump(settings, f, indent=2)
        # Hooks (user-level ones too) load only in a trusted folder; this is the file the trust
        # dialog writes.
        with open(os.path.join(d, "trustedFolders.json"), "w", encoding="utf-8") as f:
            json.dump({sc.project: "TRUST_FOLDER"}, f)

    def argv(self, sc, stand_in, prompt, bypass_trust):
        env = {"GEMINI_API_KEY": "e2e-stand-in", "GOOGLE_GEMINI_BASE_URL": stand_in.url,
               "GEMINI_TELEMETRY_ENABLED": "false"}
        return [self.executable(), "-p", prompt, "--yolo", "-m", self.model], env

    def shell(self, command):
        return Tool("run_shell_command", {"command": command})

    def _mcp_call(self, tool, args):
        return Tool(f"mcp_recalld_{tool}", args)


CLIENTS = {c.name: c for c in (ClaudeCode(), Codex(), GeminiCli())}
