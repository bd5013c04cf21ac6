"""`recalld demo`: see the pre-step work in a minute, without touching your own state.

Everything happens in a scratch RECALLD_HOME (a temporary directory, removed at the end unless
`--keep`): two memories are written with `recalld remember`, the real `recalld hook
prompt-submit` runs as a subprocess on a Claude Code UserPromptSubmit payload, what it adds to
the model's context is printed, then `recalld receipts` for that home. Each step is the
console's own command in a child process whose environment names only the scratch home, so
the user's store, settings, daemon and agent identity are never read or written.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import click

MEMORIES = (
    ("The invoices table lives in Postgres (the ledger schema), not in SQLite: the SQLite file is "
     "only the offline cache.", "decision", "invoices: Postgres, ledger schema"),
    ("Run the billing tests with `pytest tests/billing --reuse-db`; without --reuse-db the fixtures "
     "take four minutes.", "procedure", None),
)
PROMPT = "Does the invoices table live in Postgres or in SQLite? I need to add a due date."
# The shape Claude Code sends on UserPromptSubmit (tests/test_hook.py holds the same fields).
PAYLOAD = {"session_id": "demo-session", "transcript_path": None, "hook_event_name": "UserPromptSubmit",
           "permission_mode": "default", "prompt": PROMPT}


def scratch_env(home: str) -> dict:
    """The caller's environment without any RECALLD_ variable, pointed at the scratch home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALLD_")}
    env["RECALLD_HOME"] = home
    return env


def _recalld(args: list, env: dict, stdin: "bytes | None" = None, cwd: "str | None" = None) -> str:
    p = subprocess.run([sys.executable, "-m", "recalld", *args], input=stdin, env=env, cwd=cwd,
                       capture_output=True, timeout=120)
    if p.returncode != 0:
        raise click.ClickException(f"`recalld {' '.join(args)}` failed (exit {p.returncode}): "
                                   f"{p.stderr.decode(errors='replace').strip()}")
    return p.stdout.decode(errors="replace")


def injected(hook_stdout: str) -> str:
    """The additionalContext the hook's output hands Claude Code ('' when it adds nothing)."""
    if not hook_stdout.strip():
        return ""
    out = json.loads(hook_stdout)
    return (out.get("hookSpecificOutput") or {}).get("additionalContext") or ""


def run_demo(root: str, echo=click.echo) -> dict:
    """The demo's steps in `root` (an existing empty directory); returns what each step gave."""
    home, project = os.path.join(root, "home"), os.path.join(root, "project")
    os.makedirs(project)
    env = scratch_env(home)
    echo(f"Scratch home: {home} (RECALLD_HOME); project: {project}\n")
    echo("1. Two memories, written as `recalld remember` writes them:")
    for text, kind, tell in MEMORIES:
        args = ["remember", text, "--kind", kind, "--cwd", project] + (["--tell", tell] if tell else [])
        echo(f"   {_recalld(args, env).splitlines()[0]}: {text}")
    echo(f"\n2. The user types, in Claude Code: {PROMPT!r}")
    echo("   Claude Code runs `recalld hook prompt-submit` with this on stdin:")
    payload = dict(PAYLOAD, cwd=project)
    echo("   " + json.dumps(payload))
    out = _recalld(["hook", "prompt-submit", "--agent", "claude"], env, json.dumps(payload).encode(), cwd=project)
    context = injected(out)
    echo("\n3. What the model reads with the prompt (hookSpecificOutput.additionalContext):\n")
    echo("\n".join("   | " + ln for ln in context.splitlines()) if context else "   (nothing: no memory cleared the floor)")
    echo("\n4. The receipt it left (`recalld receipts`):\n")
    receipts = _recalld(["receipts"], env)
    echo("\n".join("   " + ln for ln in receipts.splitlines()))
    return {"home": home, "project": project, "hook_stdout": out, "context": context, "receipts": receipts}


def register(cli) -> None:
    @cli.command()
    @click.option("--keep", is_flag=True, help="Keep the scratch home afterwards (its path is printed).")
    def demo(keep):
        """Remember two notes in a scratch home, run the real prompt-submit hook on a sample
        Claude Code prompt, show what the model would read and the receipt. Never touches your
        own RECALLD_HOME or settings."""
        root = tempfile.mkdtemp(prefix="recalld-demo-")
        try:
            run_demo(root)
        finally:
            if keep:
                click.echo(f"\nKept {root}: try `RECALLD_HOME={os.path.join(root, 'home')} recalld receipts --json`.")
            else:
                shutil.rmtree(root, ignore_errors=True)
                click.echo(f"\nRemoved {root}.")
