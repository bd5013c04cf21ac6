"""The capture rules stated: what is of the moment, what is a fix's trivia, when an error is
joined to a fix, and which kind each statement is (recalld/capture/rules.py)."""

import pytest

from recalld.agents.base import Event
from recalld.capture import mine, rules


@pytest.mark.parametrize("text", [
    "Now let me also handle the empty state in the table view",
    "Actually, I'm reconsidering the order of the migrations here",
    "Wait, the fixture is loaded twice in this module",
    "This might be a false positive from the linter on that line",
    "I don't think the task requires a new database table",
    "Looking at the roadmap: Phase 8 and Phase 10 remain open",
    "The user wants the rock built and pushed as part of CI",
    "Would you like me to implement the mock server now?",
    "A mock server would let us test the charm when the workload is actually working",
    "WebFetch can't get me the detailed logs of the failed job",
    "Line 32: uses `python3` instead of `/opt/venv/bin/python3.10`",
    # where the work stands this turn
    "The `/plan` phase is now ready; next command: `/tasks` with the generated spec",
    "Tasks updated to [X] in `specs/002-importer/tasks.md`: T004 to T009.",
    "Build status: I couldn't run `cargo test` because the crates registry is unreachable here",
    "Retrying the fetch with escalated permissions so the lock file can be written",
    # a prediction about the fix just made
    "With the ref saved first, the grep should now find the commit on the fork",
])
def test_plans_doubts_and_narration_are_of_the_moment(text):
    assert rules.of_the_moment(text)


def test_an_agents_instruction_is_not_of_the_moment():
    assert not rules.of_the_moment("Run `mix credo gen.config` to generate `.credo.exs` with defaults")


@pytest.mark.parametrize("text", [
    "Assets under priv/static are gitignored: force-add them",
    "Textual's remove_children() does not complete synchronously",
    "SunGather uses Modbus TCP on port 502 to talk to the inverter",
])
def test_facts_and_rules_are_not_of_the_moment(text):
    assert not rules.of_the_moment(text)


@pytest.mark.parametrize("text, trivia", [
    ("Fixed by extracting helper parse_row from the loader", True),
    ("Unused functions removed from the utils module", True),
    ("Renamed TodoFilter to TodoFilters in the components", True),
    ("Fixed by quoting the env values, because Pebble only takes strings", False),
    ("Removed the fixed ids: dynamic widgets must not reuse an id", False),
    # a changelog line, its file named first or not
    ("`cmd/app/main.go` - Updated stale comment from \"on by default\" to \"off by default\"", True),
    ("src/util/telemetry.rs: Hardened logging for the submit and expire paths", True),
    ("Fixed the renderer-ready listener warning and imports in `src/lib.rs`", True),
    ("`src/lib.rs` - Fixed the listener: it must be registered before the window opens", False),
])
def test_a_fixs_trivia_unless_it_states_a_rule(text, trivia):
    assert rules.is_trivia(text) is trivia


def test_error_and_fix_are_linked_only_when_the_fix_names_its_subject():
    head = "`node build.js`: could not resolve js/app.js"
    assert rules.links(head, "the import of js/app.js needs the assets path set in build.js")
    assert not rules.links(head, "The epic covers the onboarding flow for new tenants")
    assert not rules.links("`git push`: fatal: no upstream branch", "This is the title of the epic for later")


@pytest.mark.parametrize("text, role, cue, kind", [
    # preference: the user's wish about how to work
    ("don't touch the writeups folder, i will do that myself", "user", "preference", "preference"),
    # decision: a choice said as one, by the user too
    ("include all the repos that aren't demos, and exclude copilot-collections", "user", "preference", "decision"),
    ("We decided to keep the Credo defaults and tune them later", "agent", "fact", "decision"),
    # ... a scope said as one: keep the defaults, not yet, a separate task
    ("Credo defaults may be strict — keep defaults, tune later", "agent", "fact", "decision"),
    ("No CI/CD integration yet (separate task)", "agent", "fact", "decision"),
    # ... the user's "let's ..." and "what about we ..." say what the work will be
    ("let's update the skill and also add a note to the README in this folder", "user", "preference", "decision"),
    ("we can't reach the inverter in ci, so what about we make a small mock server", "user", "constraint",
     "decision"),
    # procedure: how something is done or run
    ("After adding an identity, run `mix ash.codegen` to regenerate", "agent", "constraint", "procedure"),
    ("`uv run review-tool serve --port 8000` works from the review-tool directory", "agent", "fact", "procedure"),
    # constraint: a rule for whoever works on the project
    ("Never overwrite a non-nil timestamp with nil in the sync job", "agent", "constraint", "constraint"),
    ("Avoid `git add -A` in this repository: the build leaves large files untracked", "agent", "constraint",
     "constraint"),
    # "to avoid X" gives a reason, it is not a rule
    ("Listens on a configurable port (default 502, or 5020 to avoid requiring root)", "agent", "constraint", "fact"),
    # a description of code with rule words is a fact, not a constraint
    ("The handler always returns a 3-tuple on error from the adapter", "agent", "constraint", "fact"),
    # ... and so is what a thing can, cannot or always does: no one is told to do anything
    ("Pull request events from forks always get a read-only `GITHUB_TOKEN`", "agent", "constraint", "fact"),
    ("GitHub tokens can't be branch-scoped, so a token reaches every branch of the repository", "agent", "constraint",
     "fact"),
    ("Implement and Validate stages require a sandbox; Research can run locally", "agent", "constraint", "fact"),
    # an order, an obligation, a convention of "we" are rules
    ("The fixtures are shared: don't mutate them inside a test", "agent", "constraint", "constraint"),
    ("Migrations must be reversible because staging is rolled back nightly", "agent", "constraint", "constraint"),
    ("We never amend commits that were already pushed to the shared branch", "agent", "constraint", "constraint"),
    # fact: what holds
    ("The crash log is empty because sys.excepthook misses the async loop", "agent", "fact", "fact"),
])
def test_kinds_by_rule(text, role, cue, kind):
    assert rules.kind_of(text, role, cue) == kind


def _ev(kind, line, text="", role="assistant", tool=None, tool_input=None, is_error=False):
    role = "tool" if kind == "tool_result" else role
    return Event(session="s", cwd="/p", project=None, agent="main", role=role, kind=kind, text=text, tool=tool,
                 tool_input=tool_input, is_error=is_error, source="t.jsonl", line_no=line)


def test_an_error_is_not_glued_to_an_unrelated_sentence():
    events = [
        _ev("prompt", 1, "push the branch", role="user"),
        _ev("tool_call", 2, tool="Bash", tool_input={"command": "git push"}),
        _ev("tool_result", 3, "fatal: The current branch has no upstream branch.", tool="Bash", is_error=True),
        _ev("text", 4, "The onboarding epic is titled Tenant self-service for the Q3 release."),
    ]
    spans = mine.mine(events).spans
    assert not any("→" in sp.text and "epic" in sp.text for sp in spans)


def test_a_command_run_with_a_variable_set_is_the_same_command_when_it_goes_through():
    assert mine._head("PYTHONPATH=. CI=1 pytest -q tests") == mine._head("pytest -q") == "pytest -q"
    err = "ModuleNotFoundError: No module named 'app.settings' while importing conftest"
    events = [
        _ev("prompt", 1, "run the tests", role="user"),
        _ev("tool_call", 2, tool="Bash", tool_input={"command": "PYTHONPATH=. pytest -q"}),
        _ev("tool_result", 3, err, tool="Bash", is_error=True),
        _ev("text", 4, "The conftest import of app.settings needs the package installed: run `pip install -e .` "
                       "before pytest."),
        _ev("tool_call", 5, tool="Bash", tool_input={"command": "pytest -q"}),
        _ev("tool_result", 6, "12 passed", tool="Bash"),
    ]
    fixed = [sp for sp in mine.mine(events).spans if sp.role == "error"]
    assert fixed and "→" in fixed[0].text and "pip install -e ." in fixed[0].text


def test_the_agent_thinking_aloud_is_not_mined_but_the_user_deciding_is():
    events = [
        _ev("prompt", 1, "let's use ghcr.io for the images rather than docker hub, it is free for us", role="user"),
        _ev("text", 2, "Actually, I'm reconsidering whether the registry must be ghcr.io for this project."),
        _ev("text", 3, "Now let me also handle the arm64 build because the charm requires both platforms."),
    ]
    spans = mine.mine(events).spans
    texts = [sp.text for sp in spans]
    assert not any("reconsidering" in t or "let me" in t.lower() for t in texts)
    user = [sp for sp in spans if sp.role == "user"]
    assert user and user[0].kind == "decision"


def test_a_duplicate_in_one_pass_keeps_the_better_worded_draft_and_both_provenances():
    from recalld.capture import policies

    first = policies.Draft(kind="fact", confidence=0.98, role="agent", line=23, why="a fact; line 23",
                           text="Additionally, the rock uses a virtualenv at `/opt/venv/bin/python3.10` which should "
                                "be used instead of just `python3`.")
    second = policies.Draft(kind="fact", confidence=0.87, role="agent", line=52, why="a fact; line 52",
                            text="The rock builds the app into `/opt/app/App/app.py` and uses a virtualenv at "
                                 "`/opt/venv/bin/python3.10`, but the charm was trying to use just `python3`.")
    other = policies.Draft(kind="fact", confidence=0.9, role="agent", line=60, why="a fact; line 60",
                           text="The integration tests use a broken OCI image, so they only test failures.")
    out = policies.screen([first, second, other])
    assert [d.line for d in out.kept] == [52, 60]
    assert "also said at line 23" in out.kept[0].why
    assert [(d.line, r) for d, r in out.rejected] == [(23, "duplicate_proposal")]


def test_the_fix_linked_to_an_error_is_one_claim_after_two_errors_or_said_alone():
    from recalld.capture import policies

    cause = "Because rustup cannot write under `~/.rustup`, `cargo fmt` and `cargo check` cannot run."
    touch = f"`touch ~/.rustup/tmp/probe`: Exit code: 1 → {cause}"
    chmod = f"`chmod -R u+rwx ~/.rustup`: chmod: Operation not permitted → {cause}"
    assert policies.same_claim(touch, chmod, 88)  # two errors, one lesson
    assert policies.same_claim(touch, cause, 88) and policies.same_claim(cause, chmod, 88)
    # a different cause after the same kind of error is another claim
    assert not policies.same_claim(chmod, "`npm ci`: EACCES: permission denied, mkdir '/srv/cache' → The cache "
                                          "lives on a read-only volume mounted by the CI image.", 88)
    out = policies.screen([policies.Draft(kind="fact", text=t, confidence=0.8, role=r, line=n)
                           for t, r, n in ((touch, "error", 10), (chmod, "error", 12), (cause, "agent", 13))])
    assert len(out.kept) == 1 and [r for _, r in out.rejected] == ["duplicate_proposal"] * 2


def test_two_statements_about_one_name_are_not_merged_when_they_say_different_things():
    from recalld.capture import policies

    a = "`mix igniter.install` can add them to mix.exs automatically, even without custom installers"
    b = "Install via `mix igniter.install`, generate the Credo config, and add a unified `mix quality` alias."
    assert not policies.same_claim(a, b, 88)


def test_the_same_error_at_two_turns_is_one_claim_whatever_followed_it():
    from recalld.capture import policies

    once = "`mix compile`: error: undefined function build_query/2 (expected Repo to define such a function)"
    fixed = once + " → fix it by importing `Ecto.Query` in the context module"
    moved = ("`mix compile`: error: undefined function build_query/2 (expected Repo to define such a function)"
             " → the call moved to `Search.build_query/2`")
    other = "`mix test`: error: undefined function build_query/2 (expected Repo to define such a function)"
    started = "`pnpm dev --port 3001` → The development server is running successfully."
    assert policies.same_claim(once, fixed, 88) and policies.same_claim(fixed, moved, 88)
    assert not policies.same_claim(once, other.replace("build_query/2", "parse_filters/1"), 88)
    # Two commands that both brought a server up are two facts (the port changed).
    assert not policies.same_claim(started, "`npx next dev --port 3000` → The development server is running "
                                            "successfully.", 88)
    # A later pass sees the error again with its fix: a sighting of the pending draft, not a second one.
    out = policies.screen([policies.Draft(kind="fact", text=fixed, confidence=0.9, role="error", line=40)],
                          pending=[once])
    assert out.kept == [] and [r for _, r in out.rejected] == ["duplicate_proposal"] and len(out.again) == 1


def test_the_users_lower_case_sentences_are_cut_and_their_instructions_kept():
    prompt = ("read the notes for context. this is a bug, but the server coerces the values and that won't "
              "change so it causes no problems. note that most services are Python but two are Go. "
              "don't touch the `analysis/writeups` folder, i will do that myself.")
    spans = mine.mine([_ev("prompt", 1, prompt, role="user")]).spans
    texts = {sp.text: sp for sp in spans}
    assert any(t.startswith("don't touch the `analysis/writeups` folder") for t in texts)
    assert next(sp for t, sp in texts.items() if t.startswith("don't touch")).kind == "preference"
    assert any(t.startswith("most services are Python but two are Go") for t in texts)
    assert all(len(t) < 150 for t in texts)


def test_a_delegating_tools_launch_notice_is_not_a_report():
    notice = ("Async agent launched successfully.\nagentId: a60df47465bbd47cf (internal ID - do not mention to "
              "user. Use to resume later if needed.)\nDo not duplicate this agent's work.")
    events = [_ev("prompt", 1, "classify the fixes of every repository", role="user"),
              _ev("tool_call", 2, tool="Task", tool_input={"prompt": "classify"}),
              _ev("tool_result", 3, notice, tool="Task")]
    assert not [sp for sp in mine.mine(events).spans if sp.role == "report"]


@pytest.mark.parametrize("text, dropped", [
    ("ask me if you are unclear about anything.", True),
    ("i want to repeat that work but on a larger scale to see whether it gives a better skill.", True),
    ("Let me know if you have any questions about the layout of the repository.", True),
    ("i want to keep the old exporter running until the new one is verified", False),
    ("pause and confirm with me before using the skill writer skill to make the new skill.", False),
    ("don't touch the `analysis/writeups` folder, i will do that myself.", False),
])
def test_the_users_words_about_this_conversation_are_of_the_moment(text, dropped):
    assert rules.user_of_the_moment(text) is dropped
    spans = mine.mine([_ev("prompt", 1, text, role="user")]).spans
    assert bool(spans) is (not dropped)


def test_a_server_only_said_to_be_starting_is_not_how_it_is_run():
    events = [_ev("prompt", 1, "start the app", role="user"),
              _ev("tool_call", 2, tool="Bash", tool_input={"command": "mix phx.server"}),
              _ev("tool_result", 3, "started", tool="Bash"),
              _ev("text", 4, "The Phoenix server is starting in the background.")]
    assert not [sp for sp in mine.mine(events).spans if sp.role == "command"]
    events[-1] = _ev("text", 4, "The Phoenix server is running on port 4000.")
    assert [sp.kind for sp in mine.mine(events).spans if sp.role == "command"] == ["procedure"]


# --- rules read off the whole Codex and Claude Code sessions of the development projects ---------


@pytest.mark.parametrize("text", [
    "I\u2019ll check the README for clues before the next step",  # a curly apostrophe is the same plan
    "Since the scaffold is missing, I\u2019ll report this as a blocker and stop here",
    "Because the tests are slow, let me run only the unit suite first",
    "I don't have access to timestamps for when this conversation started",
])
def test_plans_in_curly_quotes_or_after_their_reason_are_of_the_moment(text):
    assert rules.of_the_moment(text)


def test_a_reason_before_a_rule_is_not_a_plan():
    assert not rules.of_the_moment("Since the cache is per user, keys must include the account id")


@pytest.mark.parametrize("text, dropped", [
    (".codex/prompts/specify.md make sure to pass the arguments file as the input", True),
    ("/plan use the stack notes in the arguments folder", True),
    ("Use the following decision record as the canonical content for the constitution.", True),
    ("we need a way to randomize who starts, and it should remember the bounds", False),
])
def test_a_message_naming_the_command_to_run_or_pointing_at_itself_is_of_the_moment(text, dropped):
    assert rules.user_of_the_moment(text) is dropped


@pytest.mark.parametrize("cmd, plain", [
    ("bash -lc cat .codex/prompts/implement.md", "cat .codex/prompts/implement.md"),
    ("powershell.exe -NoProfile -Command Get-ChildItem -Force", "Get-ChildItem -Force"),
    ("cd /repo && pytest -q", "pytest -q"),
    ("sh -c 'make test'", "make test"),
])
def test_a_command_is_read_without_the_shell_it_was_handed_to(cmd, plain):
    assert mine.unwrap(cmd) == plain


@pytest.mark.parametrize("cmd, look", [
    ("bash -lc rg -n specify-arg", True),
    ("sed -n '1,200p' README.md", True),
    ("git status -sb", True),
    ("Get-Content C:\\repo\\README.md", True),
    ("sed -i 's/a/b/' setup.sh", False),
    ("bash -lc pytest -q", False),
])
def test_looks_around_are_told_from_commands_that_change_or_build(cmd, look):
    assert mine.is_look(cmd) is look


def test_a_failed_look_and_an_empty_failure_are_not_errors_of_the_project():
    events = [
        _ev("prompt", 1, "run the specify step with the arguments file", role="user"),
        _ev("tool_call", 2, tool="shell", tool_input={"command": ["bash", "-lc", "cat .codex/prompts/implement.md"]}),
        _ev("tool_result", 3, "cat: .codex/prompts/implement.md: No such file or directory", tool="shell",
            is_error=True),
        _ev("tool_call", 4, tool="shell", tool_input={"command": ["bash", "-lc", "make spec ARGS=specify-arg"]}),
        _ev("tool_result", 5, '{"output": "", "metadata": {"exit_code": 1, "duration_seconds": 0.0}}', tool="shell",
            is_error=True),
        _ev("text", 6, "Re-run `/implement` so we can continue from the spec onward."),
    ]
    assert not [sp for sp in mine.mine(events).spans if sp.role == "error"]


def test_an_error_is_not_linked_by_the_words_of_no_such_file_or_directory():
    assert not rules.links("`cp a.txt build/`: cp: build/: No such file or directory",
                           "Adjusting working directory paths")


def test_a_bold_heading_is_not_a_statement_but_still_counts_as_said():
    text = "**Adjusting working directory paths**\n\nThe prompts live under `prompts/`, not `.codex/prompts/`."
    m = mine.mine([_ev("prompt", 1, "where are the prompts?", role="user"), _ev("reasoning", 2, text)])
    assert not any("Adjusting" in sp.text for sp in m.spans)
    assert m.statements == 3  # the question, the heading and the fact: the turn's size is unchanged


def test_the_users_requirement_is_mined_and_the_users_question_is_not():
    m = mine.mine([_ev("prompt", 1, "when we play every monday, we need a way to randomize who starts. "
                                    "so now, when hosted on render.com, its likely /dev/urandom?", role="user")])
    texts = [sp.text for sp in m.spans]
    assert any(t.startswith("when we play every monday, we need") for t in texts)
    assert not any(t.endswith("?") for t in texts)
    # the user's "what about we ...?" proposes: no question's penalty
    proposal = "we can't reach the inverter in ci, so what about we make a small mock server"
    assert mine.score(proposal + "?", "user")[0] == mine.score(proposal, "user")[0]


def test_a_pasted_document_is_read_and_counted_but_not_drafted():
    rules_ = "\n".join(f"- Rule {i}: we always deploy service {i} on Fridays, never on Mondays, because of the rota."
                       for i in range(60))
    paste = "Use this decision record as the source of truth.\n" + rules_
    assert len(paste) > mine.PASTE_CHARS
    m = mine.mine([_ev("prompt", 1, paste, role="user")])
    assert not m.spans
    assert m.paste_chars == len(paste) and m.statements > 60
    assert m.requests  # still a turn the user asked something in
    # the same rule typed by the user is the user's
    said = "we always deploy service 1 on Fridays, never on Mondays, because of the rota."
    assert [sp.role for sp in mine.mine([_ev("prompt", 1, said, role="user")]).spans] == ["user"]


def test_a_pasted_document_buys_no_slots():
    from recalld.capture import proposer

    paste = "x " * (3 * mine.PASTE_CHARS)
    m = mine.mine([_ev("prompt", 1, paste, role="user"), _ev("text", 2, "The build uses `make all` on CI.")])
    assert proposer._slots(m, {"max_drafts": 3}) == 3


def test_the_agents_reasoning_is_read_and_counted_but_never_a_candidate():
    # Its plans and doubts are of the moment, and what it found is what it then tells: a claim
    # only thought is not drafted, however strong its cues.
    thought = ("We decided to pin `node` 20 in `ci.yml` because the 18 image lacks the `fetch` global, "
               "and we must never use the `latest` tag.")
    events = [_ev("prompt", 1, "why does the export job keep failing?", role="user"),
              _ev("reasoning", 2, thought),
              _ev("text", 3, "The export job writes under a dated key in `exports/`, so it never overwrites "
                             "the last good file.")]
    m = mine.mine(events)
    assert {sp.role for sp in m.spans} == {"agent"}
    assert "fetch" in m.text and m.statements == 3  # said: grounding and the turn's size still count it
    # the same words told by the agent are a candidate
    told = mine.mine([events[0], _ev("text", 2, thought)])
    assert [sp.role for sp in told.spans] == ["agent"]


def test_a_substantive_turn_is_one_the_users_prompt_opened():
    def said(n):
        return "\n".join(f"The {w} module keeps cache file {n}." for w in ("auth", "billing", "export", "search", "mail"))

    turn = [_ev("prompt", 1, "tidy the caches", role="user"), _ev("text", 2, said(1)),
            # typed while the agent worked: said inside this turn, not a new request
            _ev("prompt", 3, "and keep the mail cache, it is shared", role="user"),
            _ev("text", 4, said(2))]
    m = mine.mine(turn)
    assert m.asked == 1 and mine.substantive_turns(m) == 1
    assert "and keep the mail cache, it is shared" in m.requests  # still the user's words
    # a subagent's task is the agent asking, not the user
    sub = _ev("prompt", 5, "list every cache file under src/", role="user")
    sub.agent = "agent-1"
    assert mine.mine(turn + [sub]).asked == 1
    # two requests, each opening its turn (propose --transcript reads many turns at once)
    two = turn + [_ev("turn_end", 6), _ev("prompt", 7, "now the logs", role="user"), _ev("text", 8, said(3))]
    assert mine.mine(two).asked == 2 and mine.substantive_turns(mine.mine(two)) == 2


def test_what_the_user_typed_when_declining_a_call_is_the_users_and_the_rest_is_the_harness():
    declined = ("The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a "
                "file edit, the new_string was NOT written to the file). To tell you how to proceed, the user "
                "said:\nNo, we never amend pushed commits in this repo: add a new commit instead.")
    silent = ("The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a "
              "file edit, the new_string was NOT written to the file). STOP what you are doing and wait.")
    events = [_ev("prompt", 1, "fix the typo in the last commit", role="user"),
              _ev("tool_call", 2, tool="Bash", tool_input={"command": "git commit --amend"}),
              _ev("tool_result", 3, declined, tool="Bash", is_error=True),
              _ev("tool_call", 4, tool="Bash", tool_input={"command": "git push -f"}),
              _ev("tool_result", 5, silent, tool="Bash", is_error=True)]
    m = mine.mine(events)
    assert [(sp.role, sp.line, sp.text) for sp in m.spans] == [
        ("user", 3, "No, we never amend pushed commits in this repo: add a new commit instead.")]
    assert m.errors == 0 and m.asked == 1  # not a failure of the project, not a new turn
    # the real result, as Claude Code wrote it (a committed session of another project)
    from recalld.daemon import transcripts
    from tests.helpers import REPO

    turns = transcripts.file_turns(str(REPO / "benchmarks" / "capture" / "entire-c010174c.jsonl"), unfinished=True)
    mined = [mine.mine(t) for t in turns if any(e.line_no == 246 for e in t)]
    assert len(mined) == 1
    assert any(r.startswith("OH I think the test is failing due to this commit message") for r in mined[0].requests)
    assert not any("doesn't want to proceed" in r for r in mined[0].requests)


def test_reasoning_is_never_the_far_side_of_an_error():
    # Codex titles its reasoning ("**Handling fetch failure**"); what fixed an error is what the
    # agent told, as for any draft.
    fail = "error: cannot open '.git/FETCH_HEAD': Operation not permitted"
    events = [_ev("prompt", 1, "sync with the remote and rebase", role="user"),
              _ev("tool_call", 2, tool="shell", tool_input={"command": "git fetch --all --prune"}),
              _ev("tool_result", 3, fail, tool="shell", is_error=True),
              _ev("reasoning", 4, "**Handling FETCH_HEAD failure from the sandbox on the fetch**"),
              _ev("tool_call", 5, tool="shell", tool_input={"command": "git fetch --all --prune"}),
              _ev("tool_result", 6, "ok", tool="shell")]
    spans = [sp for sp in mine.mine(events).spans if sp.role == "error"]
    assert all("Handling" not in sp.text and sp.line_to in (None, 2, 3) for sp in spans)
    told = events[:4] + [_ev("text", 4, "The FETCH_HEAD write needs escalated permissions in this sandbox.")] + events[4:]
    assert any("→ The FETCH_HEAD write needs escalated" in sp.text for sp in mine.mine(told).spans)


def test_harness_lines_are_not_the_users_or_the_projects():
    # Another tool's UserPromptSubmit hook blocked the prompt: Claude Code writes its notice as
    # the user's message.
    notice = ("Operation stopped by hook: Another session is active: \"make telemetry opt-in\"\n\n"
              "To resume the other session instead, exit Claude and run: claude -r 1234\n\n"
              "To suppress this warning in future sessions, run:\n  tool enable --quiet")
    m = mine.mine([_ev("prompt", 1, notice, role="user")])
    assert not m.spans and m.asked == 0 and not m.requests
    # Codex's own limit on a call (timeout_ms) is not the project failing; its run header
    # ("Exit code", "Wall time", "Output:") is not what failed
    timed_out = "Exit code: 124\nWall time: 10 seconds\nOutput:\ncommand timed out after 10031 milliseconds\n"
    events = [_ev("prompt", 1, "run the test suite", role="user"),
              _ev("tool_call", 2, tool="shell", tool_input={"command": "cargo test --test startup"}),
              _ev("tool_result", 3, timed_out, tool="shell", is_error=True)]
    assert mine.mine(events).errors == 0
    assert mine._first_error_line("Exit code: 101\nWall time: 3 seconds\nOutput:\n"
                                  "error[E0599]: no variant named `Db` found") == "error[E0599]: no variant named `Db` found"


def test_harness_lines_and_reasoning_stay_out_on_the_real_records():
    # The same readings on the records the clients wrote (committed sessions of other projects).
    from recalld.daemon import transcripts
    from tests.helpers import REPO

    def turn_with(name, line):
        turns = transcripts.file_turns(str(REPO / "benchmarks" / "capture" / name), unfinished=True)
        (turn,) = [t for t in turns if any(e.line_no == line for e in t)]
        return turn

    # Claude Code: another tool's prompt hook blocked a prompt (entire, line 72)
    turn = turn_with("entire-38917d7d.jsonl", 72)
    assert any(e.kind == "prompt" and e.text.startswith("Operation stopped by hook:") for e in turn)
    m = mine.mine(turn)
    assert not any("Operation stopped" in r or "claude -r" in r for r in m.requests)
    assert not any(sp.line == 72 for sp in m.spans)
    # Codex: a call that hit the limit the agent set (shannon, line 1049)
    turn = turn_with("shannon-019ba997.jsonl", 1049)
    assert any(e.line_no == 1049 and e.is_error and "command timed out after" in e.text for e in turn)
    assert not any(sp.role == "error" and sp.line == 1049 for sp in mine.mine(turn).spans)
    # Codex: a reasoning title after an error (shannon, line 1259) is not what fixed it
    turn = turn_with("shannon-019ba997.jsonl", 1259)
    assert any(e.kind == "reasoning" and "Implementing manual Debug" in e.text for e in turn)
    assert not any("Implementing manual Debug" in sp.text for sp in mine.mine(turn).spans)


def test_a_long_error_line_and_command_are_cut_between_words():
    from recalld.capture import policies

    long_err = "Error: " + " ".join(["orchestrator-service-configuration"] * 12) + " failed to start"
    cmd = "docker compose run --rm " + " ".join(["orchestrator-service-configuration"] * 8)
    events = [_ev("prompt", 1, "bring the orchestrator up", role="user"),
              _ev("tool_call", 2, cmd, tool="Bash", tool_input={"command": cmd}),
              _ev("tool_result", 3, long_err, tool="Bash", is_error=True),
              _ev("tool_call", 4, cmd, tool="Bash", tool_input={"command": cmd}),
              _ev("tool_result", 5, long_err, tool="Bash", is_error=True)]
    m = mine.mine(events)
    spans = [sp for sp in m.spans if sp.role == "error"]
    assert spans
    said = set(policies._WORD.findall(m.text.lower()))
    assert all(w in said for sp in spans for w in policies._WORD.findall(sp.text.lower()))


def test_a_leading_also_is_filler_not_progress():
    said = "Also, since this runs as a new binary, macOS requires a new accessibility permission for it."
    assert mine.tighten(said) == "Since this runs as a new binary, macOS requires a new accessibility permission for it."
    assert "progress" not in mine.score(mine.tighten(said), "agent")[2]
    assert "progress" in mine.score("Also updated the README with the new flags", "agent")[2]


def test_every_statement_read_and_not_a_candidate_says_why():
    paste = "We decided to pin the schema version in the header. " * 70  # > PASTE_CHARS: a document
    events = [
        _ev("prompt", 1, paste, role="user"),
        _ev("prompt", 2, "ok, ship it", role="user"),
        _ev("reasoning", 3, "The registry must be ghcr.io because the org pays for it."),
        _ev("text", 4, "**Release plan**\n\nNow let me also handle the arm64 build.\n\n"
                       "Renamed `build_all` to `build` in the Makefile.\n\n"
                       "The dashboard looks nicer with the new colours today.\n\n"
                       "The files `src/parse_a.py`, `src/parse_b.py` and `src/parse_c.py` hold the three parsers.\n\n"
                       "The registry must be ghcr.io because docker hub rate-limits our pulls."),
    ]
    m = mine.mine(events)
    why = {(w, line) for w, line, _ in m.passed}
    assert ("document", 1) in why and ("too_short", 2) in why and ("reasoning", 3) in why
    assert {w for w, line in why if line == 4} == {"heading", "of_the_moment", "trivia", "below_floor", "no_claim"}
    # What is a candidate is not passed over, and every statement read is one or the other (or a
    # repeat of a candidate's words).
    assert [sp.text for sp in m.spans] == ["The registry must be ghcr.io because docker hub rate-limits our pulls."]
    assert not any(t == m.spans[0].text for _, _, t in m.passed)
    assert sum(m.passed_over.values()) + len(m.spans) == m.statements
