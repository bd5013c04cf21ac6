"""The packer: one character budget per act, shared by every source (standard library only).

Rules (docs/crystals.md "The packer"):

- Each act has a budget (default 4,000 chars) and a per-item cap (default 2,000). The cap
  never exceeds the budget.
- An item over the cap is cut head-first at the cap, unless it wins outright: it is the only
  live candidate of the act and fits the budget whole.
- An item that does not fit in what is left is cut head-first to what is left when that is at
  least `min_cut` chars (a 750-char head of a crystal kept 19 of its 20 behaviours where a
  421-char head kept 12, fewer than an 81-char tell: docs/crystals.md); otherwise it degrades to its tell;
  an item whose tell does not fit either is withheld.
- Stale items are withheld (outcome "stale").
- A told item (meta `tier` "tell": recalld/core/tiers.py chose to show it as one line, not
  whole) is placed as it is, never cut: outcome "told", or "withheld" when it does not fit.
  Told items are counted apart from delivered ones (the receipt's `detail.told`).

Every item handed in comes out in exactly one bucket (whole, cut, tell, withheld, stale), so
"present, correctly selected, and cut" is visible in the receipt instead of logging like a hit.

Sharing the budget between sources: the caller concatenates the sources in a fixed priority
(hook.SOURCE_ORDER: crystals, judge queue, pre-step memories, always-set, proposals), each in
its own order. Placement is in that order, but a later source that has items holds a reserve
(RESERVE: a share of the budget, never more than that source's capped items need) that earlier
sources cannot eat into; the reserve is released once that source's items are placed. So
crystals bound to the act go first, yet a passed judge entry or a pre-step hit is never
crowded out by an oversubscribed crystal corpus.
"""

CLAIM_MARKERS = ("⛔", "❗", "⚠")
ELLIPSIS = "…"
OUTCOMES = ("whole", "cut", "tell", "told", "withheld", "stale")
DEFAULT_CAP = 2000
MIN_CUT = 750
# Share of the act's budget a source keeps for itself against earlier sources in the order.
RESERVE = {"queue": 0.25, "memory": 0.25}


# Plain classes rather than dataclasses: `dataclasses` imports `inspect`, which alone costs
# the hook process more than the rest of its imports, on every prompt and tool call.


class Item:
    __slots__ = ("key", "source", "label", "body", "tell", "stale", "meta")

    def __init__(self, key: str, source: str, label: str, body: str, tell: "str | None" = None,
                 stale: bool = False, meta: "dict | None" = None):
        self.key = key  # stable id: "m:12" memory, "q:5" queue entry, "c:name" crystal
        self.source = source  # memory | queue | crystal | proposal
        self.label = label  # shown in brackets so the agent can act on it ("m12 decision")
        self.body = body
        self.tell = tell
        self.stale = stale
        self.meta = {} if meta is None else meta

    def __repr__(self) -> str:
        return f"Item({self.key!r}, {self.source!r}, {len(self.body)} chars)"

    def render(self, body: "str | None" = None, tell: bool = False) -> str:
        """The item as the agent reads it. Label, body and tell are stored text (a crystal's id
        is its file name), so the whole line goes through untrusted.as_data: the packer measures
        and cuts what is delivered, and a cut of escaped text stays escaped."""
        from recalld.core.untrusted import as_data  # imported by runs that have something to render

        if tell:
            return as_data(f"[{self.label} · tell] {self.tell}")
        return as_data(f"[{self.label}] {self.body if body is None else body}")


class Placed:
    __slots__ = ("item", "outcome", "text", "cut_chars", "cut_claims", "withheld_chars", "wanted_chars")

    def __init__(self, item: Item, outcome: str, text: str = "", cut_chars: int = 0, cut_claims: int = 0,
                 withheld_chars: int = 0, wanted_chars: int = 0):
        self.item = item
        self.outcome = outcome  # whole | cut | tell | withheld | stale
        self.text = text  # what is delivered ("" when withheld)
        self.cut_chars = cut_chars  # chars of the full text not delivered because of a cut
        self.cut_claims = cut_claims  # marked claim lines that started in the cut tail
        self.withheld_chars = withheld_chars  # full text not delivered at all (tell, withheld, stale)
        self.wanted_chars = wanted_chars  # the full rendered text plus its separator

    def __repr__(self) -> str:
        return f"Placed({self.item.key!r}, {self.outcome!r}, {len(self.text)} chars)"


class Packed:
    __slots__ = ("placed", "budget")

    def __init__(self, placed: list, budget: int):
        self.placed = placed
        self.budget = budget

    def by(self, outcome: str) -> list:
        return [p for p in self.placed if p.outcome == outcome]

    @property
    def delivered(self) -> list:
        return [p for p in self.placed if p.outcome in ("whole", "cut", "tell")]

    @property
    def told(self) -> list:
        return [p for p in self.placed if p.outcome == "told"]

    @property
    def shown(self) -> list:
        """Everything the agent reads: the delivered items and the told ones, in order."""
        return [p for p in self.placed if p.text]

    @property
    def chars(self) -> int:
        return sum(len(p.text) + 1 for p in self.shown)

    def text(self) -> str:
        return "\n".join(p.text for p in self.shown)

    def counts(self) -> dict:
        return _tally(self.placed)

    def accounting(self) -> dict:
        """Per-act accounting for the receipt (payload-free: keys, outcomes, char counts).

        The totals are a superset of counts(); `by_source` splits them per source and `items`
        lists each matched item once as [key, outcome, delivered, cut_chars, cut_claims, wanted].
        """
        acc = _tally(self.placed)
        acc["budget"] = self.budget
        acc["over_budget"] = acc["wanted_chars"] > self.budget
        sources: dict = {}
        for p in self.placed:
            sources.setdefault(p.item.source, []).append(p)
        acc["by_source"] = {s: _tally(ps) for s, ps in sources.items()}
        acc["items"] = [[p.item.key, p.outcome, len(p.text) + 1 if p.text else 0, p.cut_chars,
                         p.cut_claims, p.wanted_chars] for p in self.placed]
        return acc


def _tally(placed: list) -> dict:
    c = {k: 0 for k in OUTCOMES}
    for p in placed:
        c[p.outcome] += 1
    c["matched"] = len(placed)
    c["delivered_chars"] = sum(len(p.text) + 1 for p in placed if p.text and p.outcome != "told")
    c["told_chars"] = sum(len(p.text) + 1 for p in placed if p.outcome == "told")
    c["cut_chars"] = sum(p.cut_chars for p in placed)
    c["cut_claims"] = sum(p.cut_claims for p in placed)
    c["withheld_chars"] = sum(p.withheld_chars for p in placed)
    c["wanted_chars"] = sum(p.wanted_chars for p in placed if p.outcome != "stale")
    return c


def count_claims(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.lstrip().startswith(CLAIM_MARKERS))


def claims_from(text: str, pos: int) -> int:
    """Marked claim lines whose marker sits at or after `pos` (those a cut at `pos` loses)."""
    n, start = 0, 0
    for line in text.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith(CLAIM_MARKERS) and start + len(line) - len(stripped) >= pos:
            n += 1
        start += len(line) + 1
    return n


def cut(full: str, limit: int) -> tuple:
    """Head-first cut of `full` to at most `limit` chars: (text, chars cut, claims cut)."""
    keep = max(limit - len(ELLIPSIS), 0)
    return full[:keep] + ELLIPSIS, len(full) - keep, claims_from(full, keep)


def pack(items: list, budget: int, cap: int = DEFAULT_CAP, *, min_cut: int = MIN_CUT,
         reserve: "dict | None" = None) -> Packed:
    """Place `items` (already in priority order) into `budget` chars. Never raises, never
    exceeds the budget: sum(len(text) + 1) over delivered items <= budget."""
    budget = max(0, int(budget))
    cap = max(1, min(int(cap), budget - 1))
    reserve = RESERVE if reserve is None else reserve
    live = [i for i in items if not i.stale]
    sole = len(live) == 1
    # What each reserving source still holds back, and how many of its items are unplaced.
    held: dict = {}
    pending: dict = {}
    for i in live:
        pending[i.source] = pending.get(i.source, 0) + 1
        if reserve.get(i.source):
            held[i.source] = held.get(i.source, 0) + min(len(i.render()), cap) + 1
    for s in held:
        held[s] = min(held[s], int(reserve[s] * budget))

    placed = []
    left = budget
    for item in items:
        full = item.render()
        wanted = len(full) + 1
        if item.stale:
            placed.append(Placed(item, "stale", withheld_chars=len(full), wanted_chars=wanted))
            continue
        avail = left - sum(v for s, v in held.items() if s != item.source)
        if item.meta.get("tier") == "tell":
            p = Placed(item, "told", full) if wanted <= avail else Placed(item, "withheld", withheld_chars=len(full))
        else:
            p = _place(item, full, avail, cap, budget if sole else 0, min_cut)
        p.wanted_chars = wanted
        used = len(p.text) + 1 if p.text else 0
        left -= used
        if item.source in held:
            held[item.source] = max(0, held[item.source] - used)
        pending[item.source] -= 1
        if not pending[item.source]:
            held.pop(item.source, None)
        placed.append(p)
    return Packed(placed, budget)


def _place(item: Item, full: str, avail: int, cap: int, outright: int, min_cut: int) -> Placed:
    if len(full) + 1 <= min(avail, max(cap + 1, outright)):
        return Placed(item, "whole", full)
    limit = min(cap, avail - 1)
    if limit > len(ELLIPSIS) and (limit >= cap or limit >= min_cut):
        text, cut_chars, claims = cut(full, limit)
        return Placed(item, "cut", text, cut_chars, claims)
    if item.tell:
        tell = item.render(tell=True)
        if len(tell) + 1 <= avail:
            return Placed(item, "tell", tell, withheld_chars=len(full))
    return Placed(item, "withheld", withheld_chars=len(full))
