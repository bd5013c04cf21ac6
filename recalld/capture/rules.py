"""What a statement must be to stand on its own a week later, and which kind it is.

Three rules the miner applies (recalld/capture/mine.py) before anything is scored:

- **Of the moment.** The agent thinking aloud: plans ("Now let me also handle", "I need to",
  "Would you like me to"), doubts and second thoughts ("Actually, I'm reconsidering", "Wait,",
  "This might be a false positive", "I don't think the task requires"), and narration of what
  it reads ("Looking at the roadmap:", "The user wants"). True when said, useless next week.
  Applies to the agent's words only: the user saying "we should" is a decision.
- **Trivia of a fix.** "Fixed by extracting helper X", "Unused functions removed", "Renamed A
  to B": true and useless unless the statement also states a rule (a constraint or a marker
  for later), which is then what it teaches.
- **Error -> fix only when linked.** A failing command is joined to the agent's next sentence
  only when that sentence names the error or its subject (a word of the error line or of the
  command, not a common word); otherwise the error stands alone, and only when it teaches
  something (it recurred, or the same command later went through).

Kinds, one rule each, in this order (tests/test_capture_rules.py states them per kind):

- an answer keeps its question's kind (mine.score: what to do -> decision, else preference);
  a command that brought something up is a **procedure**;
- **decision**: a choice said as one (decided, chose, went with, let's use, "we should",
  "include X and exclude Y"), by anyone;
- **preference**: the user's wish about how to work ("don't touch the writeups folder");
- **procedure**: how something is done or run (a command to run, "after X run Y", a
  workflow), not a report of an attempt ("the service is trying to run `x`");
- **constraint**: a rule that instructs whoever works on the project (must, should, make
  sure; "Never X", "Don't X", "Avoid X" as an order; "we never ..."), not what a thing can,
  cannot or always does ("forks always get a read-only token", "the handler always returns"
  are facts);
- **fact**: everything else that holds, the agent's "uses X instead of Y" included.

Standard library only.
"""

import re

# --- of the moment ---------------------------------------------------------------------------

_PLAN = re.compile(
    r"^(?:(?:ok(?:ay)?|so|now|next|then|first|also|and|but|alright)[,:]?\s+)*"
    r"(?:let me\b|let's (?:check|look|see|try|start|run|read|find|update|add|fix|make|create|verify|first)\b|"
    r"i(?:'ll| will| need to| should| want to| must| can| could| am going to|'m going to| would)\b|"
    r"we(?:'ll| will| need to|'d need to| would need to)\b|i'd (?:suggest|recommend)\b|"
    r"(?:would|do|shall) you (?:like|want)\b|want me to\b|should i\b|shall i\b|"
    r"looking at\b|checking\b|reading\b|searching\b|the (?:error|output|log|result)s? (?:shows?|says|indicates?)\b|the user (?:wants|is asking|asked|said|has|hasn't)\b|"
    r"this (?:is|was) (?:a |an )?(?:really |very )?(?:good|great|excellent|smart|interesting) (?:idea|approach|point)\b|"
    # a plan with its reason in front: "Since X is out of scope, I'll check the README"
    r"(?:since|because|as|once|now that|given that)\b[^,;]{0,100},\s*(?:let me|i'll|i will|i need to|i should|i'm going to)\b)",
    re.I)
_DOUBT = re.compile(
    r"^(?:actually|wait|hmm+|hm|oh|ah|aha|interesting|oops|sorry)\b|"
    r"\b(?:i'm|i am) (?:reconsidering|not sure|unsure|wondering|thinking)\b|\bi (?:don't|do not) think\b|"
    r"\b(?:might|may|could) be (?:a )?(?:false positive|wrong|related|the (?:issue|problem|cause))\b|"
    r"\bi (?:wonder|suspect|guess)\b|\bshould now\b|\bwould (?:let|allow|enable|help|give) (?:us|you|me)\b|"
    r"\b(?:get|give|show|send|tell) me\b|\bprobably\b|"
    r"\b(?:needs? updating|already (?:done|updated|covered)|nothing (?:else )?to (?:update|change))\b|\bmaybe (?:i|we|it|the|this)\b|\bnot sure (?:if|whether|why)\b|"
    r"^i (?:don't|do not) have (?:access to|the previous|any (?:previous|prior))\b|"
    r"^(?:it )?(?:seems|looks) like (?:the|this|it)\b.*\b(?:might|may|probably|likely)\b", re.I)


# Where in a file the agent is looking ("Line 32: uses python3", "src/charm.py:251 runs"): the
# spot changes with the next edit.
_SPOT = re.compile(r"^(?:lines? \d+(?:[-–]\d+)?|[\w./-]+\.\w+:\d+(?:-\d+)?)\b[:,]?", re.I)


_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})


def plain(text: str) -> str:
    """The text with typographic quotes made plain ("I\u2019ll" -> "I'll"), for matching only:
    Codex and GPT write curly apostrophes, and the rules are written with straight ones."""
    return (text or "").translate(_QUOTES)


# Where the work stands this turn: a phase ready, the next command, checkboxes ticked, what the
# agent could not run here, a retry with more permissions. True today, stale tomorrow.
_PROGRESS = re.compile(
    r"\bis now (?:ready|complete|done|in place)\b|\bnext (?:command|step)s?:|"
    r"\b(?:tasks?|checkboxes?|checklist) (?:updated|marked|checked|ticked)\b|\[x\]|"
    r"^(?:build|test|lint|ci) status\b|"
    r"\bi (?:couldn't|could not|wasn't able to|was unable to) (?:run|verify|test|build|execute|check)\b|"
    r"\bretrying\b|\bwith (?:escalated|elevated) permissions\b", re.I)


def of_the_moment(text: str) -> bool:
    """A plan, a doubt or narration of the agent's own work: not a fact that outlives the turn."""
    t = plain(text).strip().lstrip("-*> ")
    if t.endswith(":"):  # the lead-in of a list ("the skill has three components:"), not a claim
        return True
    return bool(_PLAN.search(t) or _DOUBT.search(t) or _SPOT.search(t) or _PROGRESS.search(t))


# What the user says about this conversation only: an offer to answer questions, the wish to
# do the task at hand. The rest of what the user says (a rule, a wish about how to work, "we
# should", "don't touch X") is the point and is never dropped.
_USER_MOMENT = re.compile(
    r"\bif (?:you are|you're|anything is|something is|any of this is) (?:unclear|confusing|not clear)\b|"
    # a message that opens by naming the command or prompt file to run asks for this turn's work
    r"^(?:/[a-z][\w.-]*|\.?[\w/.-]*prompts/[\w.-]+\.md)\b|"
    # "use the following ... as": the rest of this message, not a rule
    r"\b(?:use|take|treat) the (?:following|attached|above|below)\b|"
    r"\bif you have (?:any )?questions\b|"
    r"^(?:(?:so|and|but|now|ok(?:ay)?)[,]?\s+)?i(?:'d| would)? (?:want|like|need|wanted) to (?!keep|use|avoid|always|never)\w+",
    re.I)


def user_of_the_moment(text: str) -> bool:
    """The user's words about this conversation, not about the project ("ask me if you are
    unclear about anything", "i want to repeat that work on a larger scale")."""
    return bool(_USER_MOMENT.search(plain(text).strip()))


# --- trivia of a fix -------------------------------------------------------------------------

# A changelog line may name its file first: "`main.go` - Updated the comment", "src/x.py: Added".
_FILE_LEAD = r"(?:`?[\w./-]+`?(?::|\s+[-–—])\s+)?"
_TRIVIA = re.compile(
    rf"^{_FILE_LEAD}(?:documented|noted|mentioned|listed)\b|"
    r"^(?:(?:this|that|it|which) (?:was |is )?)?(?:fixed|resolved|solved) by\b|"
    r"^(?:(?:the|all|any) )?(?:unused|dead|duplicate|stale|old|leftover)\b[^.]{0,60}\b(?:removed|deleted|dropped|cleaned up)\b|"
    rf"^{_FILE_LEAD}(?:removed|deleted|dropped|renamed|extracted|moved|cleaned up|tidied|reformatted|refactored|"
    r"changed|updated|added|bumped|replaced|wrapped|split|inlined|fixed|implemented|created|introduced|"
    r"converted|migrated|hardened)\b|"
    r"^(?:changed|updated) (?:from|to)\b", re.I)
# What makes a fix statement teach something: it says what must (not) be done, or marks itself.
_RULE = re.compile(r"\b(?:must(?:n't| not)?|never|always|do not|don't|should(?:n't| not)?|requires?|"
                   r"make sure|avoid|otherwise|only works|so that|to avoid|because)\b", re.I)


def is_trivia(text: str) -> bool:
    """A fix's detail ("Fixed by renaming A to B"), unless it also states a rule."""
    t = plain(text).strip()
    return bool(_TRIVIA.search(t)) and not _RULE.search(t)


# --- error -> fix ----------------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z_][\w.-]{3,}")
_COMMON = set("""error errors failed failure fatal cannot could would should there their this that with
from into have been does doesn't found line file files exit code command using used when what which
while also then than only just some more most other about after before again because since still
warning warnings issue problem fix fixed make made need needs like this these those your mine here
true false none null returned return value values type types test tests run runs running build
let's let such directory directories output metadata duration seconds exit_code exit""".split())


def subject_words(text: str) -> set:
    """The words that name what an error is about (its module, file, flag, identifier)."""
    out = set()
    for w in _WORD.findall(text or ""):
        w = w.lower().strip(".-")
        if len(w) >= 4 and w not in _COMMON:
            out.add(w)
            out.update(p for p in re.split(r"[./_-]", w) if len(p) >= 4 and p not in _COMMON)
    return out


def links(error_head: str, fix: str) -> bool:
    """The fix names the error or its subject: they share a word that is not a common word."""
    return bool(subject_words(error_head) & subject_words(fix))


# --- kinds -----------------------------------------------------------------------------------

DECIDED = re.compile(
    r"\bwe(?:'ve| have)? (?:decided|chose|agreed|settled|picked|opted)\b|\bdecided\b|\bdecision\b|"
    r"\b(?:chose|chosen|opted for|settled on|went with|going with)\b|"
    r"\blet's (?:go with|use|keep|stick with|do|build|make|add)\b|\bwe should\b|\bshould be (?:done|built|pushed)\b|"
    r"\b(?:keep|leave) (?:the )?defaults?\b|\bout of scope\b|\bseparate task\b|\bno-gos?\b|"
    r"\b(?:not|no) [\w/ -]{1,30} yet\b|\b(?:what|how) about (?:we|if we)\b|\bwhy don't we\b|"
    r"^(?:i think )?(?:\w+ )?(?:can|should) be (?:finished|dropped|skipped|deferred)\b|"
    r"^(?:include|exclude|keep|drop|skip|use|go with)\b.*\b(?:and|but) (?:exclude|include|not|skip|keep)\b",
    re.I)
PROCEDURE = re.compile(
    r"\b(?:run|execute|invoke|call) `[^`]+`|`[^`]+` (?:to|before|after|then)\b|"
    r"\b(?:after|before|to) [\w ,'-]{2,40}, (?:run|use|call|restart|rebuild|redeploy|force-add)\b|"
    r"\bworkflow\b|\bstep \d\b|\buv run\b|\b(?:pipeline|pipe ?line):|→ [\w ]+ →|"
    r"\bthe (?:command|way) to\b|\b(?:can be|is) (?:run|started|built|tested) (?:with|by|from)\b", re.I)
# A rule instructs whoever works on the project: an obligation (must, should, make sure), an
# order ("Never X", "Don't X", "Avoid X" at the head of a sentence or clause), a convention of
# "we" or "you" ("we never amend pushed commits"). What a thing can, cannot or always does is a
# fact about it: "forks always get a read-only token", "tokens can't be branch-scoped", "the
# stage requires a sandbox".
INSTRUCTS = re.compile(
    r"\b(?:must(?:n't| not)?|should(?:n't| not)?|make sure|be sure to|only (?:use|run|call))\b|"
    r"\b(?:we|you) (?:must|should|never|always|don't|do not|cannot|can't|need to|have to)\b|"
    r"(?:^|[:;—–]\s+|\s-\s+|[.!]\s+)(?:never|always|don't|do not|avoid|make sure|only)\b", re.I)
# A description of what code does ("the handler must return", "X always returns Y") is a fact:
# the rule words are about the code's behaviour, not an instruction to whoever works on it.
DESCRIBES_CODE = re.compile(r"^(?:the |this |that |a |an )?[`\w.()-]+(?: [`\w.()-]+){0,3} "
                            r"(?:always|never|must|cannot|can't|doesn't|does not|won't) "
                            r"(?:return|returns|raise|raises|emit|emits|call|calls|fire|fires|complete|"
                            r"completes|apply|applies|catch|catches|run|runs|affect|affects|handle|handles)\b", re.I)


# The user opening with "let's ..." says what the work will be: a choice, not a taste.
_USER_LETS = re.compile(r"^(?:(?:ok(?:ay)?|so|then|now|yes|great)[,.!]?\s+)*let's (?!not\b)\w+", re.I)

# "The service is trying to run `x`" reports what happened, it is not how to run anything.
_ATTEMPT = re.compile(r"\b(?:trying|tries|tried|attempting|attempts|attempted|was|were|is) to (?:run|execute|call)\b", re.I)


def kind_of(text: str, role: str, cue_kind: str) -> str:
    """The draft's kind by the rules above; `cue_kind` is the strongest cue's (mine.score)."""
    t = plain(text).strip()
    if role == "answer":
        return cue_kind
    if role == "command":
        return "procedure"
    if DECIDED.search(t):
        return "decision"
    if role == "user" and _USER_LETS.search(t):
        return "decision"
    if role in ("user", "delegation") and cue_kind == "preference":
        return "preference"
    if PROCEDURE.search(t) and role != "error" and not _ATTEMPT.search(t):
        return "procedure"
    if INSTRUCTS.search(t) and not DESCRIBES_CODE.search(t):
        return "constraint"
    if role == "user" and cue_kind == "decision":
        return "decision"
    if cue_kind == "constraint" and role == "error":
        return "constraint"
    # "uses `python3` instead of the venv" from the agent is how things are, not a choice made:
    # a decision needs a decision said as one (above), or the user saying it.
    if cue_kind == "decision" and role not in ("user", "answer"):
        return "fact"
    return "fact" if cue_kind in ("constraint", "fact") else cue_kind
