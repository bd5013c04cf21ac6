"""The packer: one character budget per act, shared by every source (standard library only).

Rules (seed 000): per-item cap unless the item wins outright (it is the only candidate and
fits the budget); an item over the cap is cut head-first at the cap; an item that does not fit
degrades to its tell; an item whose tell does not fit either is withheld; stale items are
withheld. Every item handed in comes out in exactly one bucket, so "present, correctly
selected, and cut" is visible in the receipt instead of logging like a hit.

The caller decides the order. Sources are concatenated in a fixed priority (see
docs/architecture.md, "Sharing the budget"); within a source the order is the source's own.
"""

from dataclasses import dataclass, field

CLAIM_MARKERS = ("⛔", "❗", "⚠")
ELLIPSIS = "…"


@dataclass
class Item:
    key: str  # stable id: "m:12" memory, "q:5" queue entry, "c:name" crystal
    source: str  # memory | queue | crystal | proposal
    label: str  # shown in brackets so the agent can act on it ("m12 decision")
    body: str
    tell: "str | None" = None
    stale: bool = False
    meta: dict = field(default_factory=dict)

    def render(self, body: "str | None" = None, tell: bool = False) -> str:
        if tell:
            return f"[{self.label} · tell] {self.tell}"
        return f"[{self.label}] {self.body if body is None else body}"


@dataclass
class Placed:
    item: Item
    outcome: str  # whole | cut | tell | withheld | stale
    text: str = ""  # what is delivered ("" when withheld)
    cut_chars: int = 0
    cut_claims: int = 0
    withheld_chars: int = 0


@dataclass
class Packed:
    placed: list
    budget: int

    def by(self, outcome: str) -> list:
        return [p for p in self.placed if p.outcome == outcome]

    @property
    def delivered(self) -> list:
        return [p for p in self.placed if p.outcome in ("whole", "cut", "tell")]

    @property
    def chars(self) -> int:
        return sum(len(p.text) + 1 for p in self.delivered)

    def text(self) -> str:
        return "\n".join(p.text for p in self.delivered)

    def counts(self) -> dict:
        c = {k: 0 for k in ("whole", "cut", "tell", "withheld", "stale")}
        for p in self.placed:
            c[p.outcome] += 1
        c["delivered_chars"] = self.chars
        c["cut_chars"] = sum(p.cut_chars for p in self.placed)
        c["cut_claims"] = sum(p.cut_claims for p in self.placed)
        c["withheld_chars"] = sum(p.withheld_chars for p in self.placed)
        return c


def count_claims(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.lstrip().startswith(CLAIM_MARKERS))


def pack(items: list, budget: int, cap: int = 2000) -> Packed:
    placed = []
    left = budget
    live = [i for i in items if not i.stale]
    sole = len(live) == 1
    for item in items:
        full = item.render()
        if item.stale:
            placed.append(Placed(item, "stale", withheld_chars=len(full)))
            continue
        text, cut_chars, cut_claims = full, 0, 0
        if len(full) > cap and not (sole and len(full) + 1 <= budget):
            head = full[: max(cap - len(ELLIPSIS), 0)]
            tail = full[len(head):]
            text, cut_chars, cut_claims = head + ELLIPSIS, len(tail), count_claims(tail)
        if len(text) + 1 <= left:
            left -= len(text) + 1
            placed.append(Placed(item, "cut" if cut_chars else "whole", text, cut_chars, cut_claims))
            continue
        if item.tell:
            tell = item.render(tell=True)
            if len(tell) + 1 <= left:
                left -= len(tell) + 1
                placed.append(Placed(item, "tell", tell, withheld_chars=len(full)))
                continue
        placed.append(Placed(item, "withheld", withheld_chars=len(full)))
    return Packed(placed, budget)
