"""git: the `commit` act comes from a pre-commit hook (`recalld install git-hook`, written by
recalld/install/githook.py). The hook gets no JSON from git: `recalld hook commit` builds the
payload itself (the staged files), and what it prints is plain text for whoever ran
`git commit`. A non-zero exit would abort the commit, so the script always exits 0.
"""

from recalld.agents.base import Adapter

HOOK_NAME = "pre-commit"  # the file under the repository's hooks directory


class Git(Adapter):
    name = "git"
    own_events = ("commit",)


ADAPTER = Git()
