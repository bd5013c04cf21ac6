"""Two tiers of delivery: which candidates reach the agent whole, which as a one-line tell
(standard library only: the pre-step hook decides this on every prompt).

Whole text only where the evidence is strong: a lexical match that covers `floor` of the
prompt's informative terms (the judge's threshold does the same for the background queue). The
next few candidates that clear a loose gate (a weaker lexical match, or a dense cosine) go out
as tells: one short line with the memory's id, the first of them saying how to open one. The
agent is a far stronger judge than any model that runs here, and a line costs it one glance.

The tells are taken in the order of their cosine when the semantic channel scored them (the
lexical order otherwise), not in the fused order: the fusion's weights were fitted for what to
inject first, and the cosine alone placed paraphrased answers as high among the candidates
below the floor, with nothing fitted. A prompt with no answer costs about `max` lines of
`chars`, so those two trade reach against length; recalld/bench/tells.py fits them and the
gates leave-one-project-out (the `tells.*` settings; `floor` is not refitted there).
"""

# How a tell says it can be opened: recalld's MCP tool `show`, or the same from a shell. Said
# once, on the first tell of a block: each line's label `[m12 tell]` names its id.
OPEN_HINT = " (open: recalld show {id})"
CLAUSE_ENDS = (". ", "; ", "? ", "! ", "\n", " — ", " -- ")


class Cand:
    """One candidate of the pre-step: its lexical coverage (0 when only the dense side found
    it) and its cosine (None when the dense side did not say), in the fused order."""

    __slots__ = ("id", "kind", "text", "tell", "coverage", "cos", "via")

    def __init__(self, id: int, kind: str, text: str, tell, coverage: float, cos, via: str):
        self.id, self.kind, self.text, self.tell = id, kind, text, tell
        self.coverage, self.cos, self.via = coverage, cos, via

    def __repr__(self) -> str:
        return f"Cand(m{self.id}, cov={self.coverage:.2f}, cos={self.cos}, {self.via})"


def config(cfg: dict) -> dict:
    """The tier settings of a settings dict, with the floor for whole text."""
    t = cfg["tells"]
    return {"floor": float(cfg["floor"]), "whole": bool(t["whole"]), "max": int(t["max"]),
            "tell_floor": float(t["floor"]), "min_cos": float(t["min_cos"]),
            "max_whole": int(cfg["max_results"]), "chars": int(t["chars"])}


def choose(cands: list, tc: dict, not_told: "set | None" = None) -> tuple:
    """(whole, told): the candidates delivered whole, in the fused order, and those told.
    Whole: coverage at or above `floor` (none when `whole` is off: those are told instead).
    Told: of the rest, by cosine where one was scored (then in the given order), at most
    `max` whose coverage reaches `tell_floor` or `floor` or whose cosine reaches `min_cos`;
    never one of `not_told` (ids this session was already told)."""
    whole = [c for c in cands if tc["whole"] and c.coverage >= tc["floor"]][:tc["max_whole"]]
    taken = {id(c) for c in whole}
    rest = sorted((c for c in cands if id(c) not in taken), key=lambda c: (c.cos is None, -(c.cos or 0.0)))
    told = [c for c in rest if (not not_told or c.id not in not_told) and (
            c.coverage >= tc["tell_floor"] or c.coverage >= tc["floor"]
            or (c.cos is not None and c.cos >= tc["min_cos"]))][:max(tc["max"], 0)]
    return whole, told


def first_clause(text: str, room: int) -> str:
    """The memory's first clause, at most `room` chars, cut on a word (with an ellipsis)."""
    s = " ".join(text.split())
    end = len(s)
    for mark in CLAUSE_ENDS:
        i = s.find(mark)
        if 0 < i < end:
            end = i + (1 if mark[0] in ".?!" else 0)
    s = s[:end].rstrip(" ,:;")
    if len(s) <= room:
        return s
    cut = s[: max(room - 1, 1)]
    sp = cut.rfind(" ")
    if sp >= room // 2:
        cut = cut[:sp]
    return cut.rstrip(" ,:;(") + "…"


def tell_body(mid: int, label: str, text: str, tell, chars: int, hint: bool = True) -> str:
    """What follows `[label] ` in a tell line: the memory's own `tell` when it has one, else its
    first clause, cut so that `[label] ` and it are at most `chars`; with `hint`, how to open it
    after that (the first line of a block)."""
    room = max(chars - len(label) - 3, 16)
    return first_clause(tell or text, room) + (OPEN_HINT.format(id=mid) if hint else "")
