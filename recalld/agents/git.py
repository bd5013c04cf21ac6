"""git: the `commit` act comes from a pre-commit hook (`recalld install git-hook`, written by
recalld/install/githook.py). The hook gets no JSON from git: `recalld hook commit` builds the
payload itself (the staged files and HEAD), and what it prints is plain text for whoever ran
`git commit`. recalld's hook always exits 0; the pre-commit script aborts the commit only when
that text starts with GATE_MARK (a `deliver: gate` crystal, once per commit being made).
"""

from recalld.agents.base import Adapter

HOOK_NAME = "pre-commit"  # the file under the repository's hooks directory
# The first line of the hook's output when it holds the commit; the pre-commit script then
# prints the rest and exits 1, so `git commit` stops before the commit exists.
GATE_MARK = "recalld: this commit was held once, before it was made."


class Git(Adapter):
    name = "git"
    own_events = ("commit",)
    # Whoever ran `git commit` reads the hook's output: a person at once, an agent with the
    # command's output (after the commit exists, unless the commit was held).
    context_events = frozenset({"commit"})
    gate_events = frozenset({"commit"})

    def context_output(self, native_event, block):
        return block + "\n"

    def gate_output(self, native_event, reason):
        return GATE_MARK + "\n" + reason + "\n"


ADAPTER = Git()
