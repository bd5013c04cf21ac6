"""Numbered schema migrations. Append new ones; never edit one that has shipped.

PRAGMA user_version records the last applied number. db.ensure_schema applies every pending
migration in one transaction (BEGIN IMMEDIATE, which also serialises concurrent first opens),
not one per step: a failure or crash in any step leaves the store exactly as it was, at the
version it had, never part way up (an upgrade from 3 that fails in 5 keeps 4's tables out
too), so the release that wrote it can still open it. SQLite's DDL, ALTER TABLE and the
user_version pragma included, is transactional.
"""

MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "core: memories + FTS5, change log, receipts, injection queue, served log",
        """
CREATE TABLE memories (
    id INTEGER PRIMARY KEY,
    text TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('decision','constraint','fact','procedure','preference')),
    scope TEXT NOT NULL CHECK (scope IN ('agent','project','shared')),
    project TEXT NOT NULL,
    agent TEXT NOT NULL,
    tell TEXT,
    always INTEGER NOT NULL DEFAULT 0 CHECK (always IN (0, 1)),
    session TEXT,
    source TEXT,
    created_at TEXT NOT NULL,
    valid_from TEXT NOT NULL,
    invalid_at TEXT,
    superseded_by INTEGER REFERENCES memories(id),
    invalid_reason TEXT,
    -- identifier pieces (camelCase / dotted / slashed names split apart), indexed with the text
    aux TEXT NOT NULL DEFAULT '',
    -- the porter-stemmed terms of text+tell+aux, for the query-coverage score
    terms TEXT NOT NULL DEFAULT ''
);
CREATE INDEX memories_current ON memories(project, scope) WHERE invalid_at IS NULL;
CREATE INDEX memories_always ON memories(always) WHERE always = 1 AND invalid_at IS NULL;

CREATE VIRTUAL TABLE memories_fts USING fts5(
    text, tell, aux,
    content='memories', content_rowid='id',
    tokenize='porter unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE memories_vocab USING fts5vocab(memories_fts, row);

CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, text, tell, aux) VALUES (new.id, new.text, coalesce(new.tell, ''), new.aux);
END;
-- A memory's words never change after it is written: correct it by superseding it.
CREATE TRIGGER memories_no_rewrite BEFORE UPDATE OF text, tell, kind, scope, project, agent, aux, terms, created_at, valid_from ON memories BEGIN
    SELECT RAISE(ABORT, 'memories are immutable: supersede instead');
END;
-- Invalidation is one-way: a memory, once invalid, is never revived.
CREATE TRIGGER memories_no_revive BEFORE UPDATE OF invalid_at ON memories
WHEN old.invalid_at IS NOT NULL BEGIN
    SELECT RAISE(ABORT, 'an invalidated memory cannot change again');
END;
CREATE TRIGGER memories_no_delete BEFORE DELETE ON memories BEGIN
    SELECT RAISE(ABORT, 'memories are never deleted: retract or supersede');
END;

-- Append-only history of every change to a memory's validity.
CREATE TABLE memory_changes (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    memory_id INTEGER NOT NULL REFERENCES memories(id),
    action TEXT NOT NULL,
    other_id INTEGER,
    reason TEXT,
    session TEXT
);
CREATE INDEX memory_changes_memory ON memory_changes(memory_id);

-- One receipt per hook run or background pass. Payload-free: ids, counts, durations, codes.
CREATE TABLE receipts (
    id INTEGER PRIMARY KEY,
    uid TEXT NOT NULL UNIQUE,
    time TEXT NOT NULL,
    source TEXT NOT NULL,
    hook TEXT,
    act TEXT,
    agent TEXT,
    session TEXT,
    project TEXT,
    outcome TEXT NOT NULL,
    duration_ms REAL,
    candidates INTEGER NOT NULL DEFAULT 0,
    above_floor INTEGER NOT NULL DEFAULT 0,
    delivered INTEGER NOT NULL DEFAULT 0,
    cut INTEGER NOT NULL DEFAULT 0,
    withheld INTEGER NOT NULL DEFAULT 0,
    delivered_ids TEXT NOT NULL DEFAULT '[]',
    delivered_chars INTEGER NOT NULL DEFAULT 0,
    cut_chars INTEGER NOT NULL DEFAULT 0,
    withheld_chars INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX receipts_session ON receipts(session, id);
CREATE INDEX receipts_hook ON receipts(hook, id);

-- What the background judge passed, waiting for the session's next hook.
CREATE TABLE queue (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    session TEXT NOT NULL,
    memory_id INTEGER NOT NULL REFERENCES memories(id),
    score REAL,
    receipt_uid TEXT,
    expires_at TEXT
);
CREATE INDEX queue_session ON queue(session, id);
CREATE TABLE queue_delivered (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    queue_id INTEGER NOT NULL UNIQUE REFERENCES queue(id),
    session TEXT NOT NULL,
    receipt_uid TEXT NOT NULL,
    outcome TEXT NOT NULL
);

-- Every delivery of a packed item (memory, queue entry, crystal), for fair rotation.
CREATE TABLE served (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    session TEXT NOT NULL,
    item TEXT NOT NULL,
    outcome TEXT NOT NULL,
    receipt_uid TEXT NOT NULL
);
CREATE INDEX served_session ON served(session, item);

CREATE TRIGGER receipts_append_only_u BEFORE UPDATE ON receipts BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER receipts_append_only_d BEFORE DELETE ON receipts BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER memory_changes_append_only_u BEFORE UPDATE ON memory_changes BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER memory_changes_append_only_d BEFORE DELETE ON memory_changes BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER queue_append_only_u BEFORE UPDATE ON queue BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER queue_delivered_append_only_u BEFORE UPDATE ON queue_delivered BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER served_append_only_u BEFORE UPDATE ON served BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER served_append_only_d BEFORE DELETE ON served BEGIN SELECT RAISE(ABORT, 'append-only'); END;
""",
    ),
    (
        2,
        "daemon: transcript tail offsets, normalized transcript events, daemon events (needs, turn ends, lifecycle)",
        """
-- Where the tailer is in each transcript, as append-only events: the latest row per path is
-- the resume point. `generation` counts restarts of the file (truncation, replacement), so
-- (source, generation, line_no) names one line for ever.
CREATE TABLE tail_offsets (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    path TEXT NOT NULL,
    dev INTEGER,
    inode INTEGER,
    size INTEGER NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0,
    offset INTEGER NOT NULL,
    lines INTEGER NOT NULL,
    malformed INTEGER NOT NULL DEFAULT 0,
    events INTEGER NOT NULL DEFAULT 0,
    reason TEXT NOT NULL CHECK (reason IN ('read', 'start', 'truncated', 'replaced', 'skipped'))
);
CREATE INDEX tail_offsets_path ON tail_offsets(path, id);

-- Every normalized transcript event, stored once (the offset row and its events commit together).
CREATE TABLE transcript_events (
    id INTEGER PRIMARY KEY,
    ingested_at TEXT NOT NULL,
    time TEXT,
    session TEXT NOT NULL,
    cwd TEXT,
    project TEXT,
    agent TEXT NOT NULL,
    role TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('prompt','text','reasoning','tool_call','tool_result','turn_end')),
    text TEXT NOT NULL DEFAULT '',
    tool TEXT,
    tool_input TEXT,
    is_error INTEGER NOT NULL DEFAULT 0,
    uuid TEXT,
    source TEXT NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0,
    line_no INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    UNIQUE (source, generation, line_no, seq)
);
CREATE INDEX transcript_events_session ON transcript_events(session, id);

-- What the daemon decided and when: needs detected, turn ends dispatched, starts and stops.
CREATE TABLE daemon_events (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    kind TEXT NOT NULL,
    session TEXT,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX daemon_events_kind ON daemon_events(kind, id);

CREATE TRIGGER tail_offsets_append_only_u BEFORE UPDATE ON tail_offsets BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER tail_offsets_append_only_d BEFORE DELETE ON tail_offsets BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER transcript_events_append_only_u BEFORE UPDATE ON transcript_events BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER transcript_events_append_only_d BEFORE DELETE ON transcript_events BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER daemon_events_append_only_u BEFORE UPDATE ON daemon_events BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER daemon_events_append_only_d BEFORE DELETE ON daemon_events BEGIN SELECT RAISE(ABORT, 'append-only'); END;
""",
    ),
    (
        3,
        "capture: proposals, their append-only state transitions, turn boundaries, proposer passes",
        """
-- Turn boundaries seen by the stop hook (or the transcript): the proposer reads what is new
-- since the previous one of the same session. `text` is the agent's last message, redacted.
CREATE TABLE proposal_boundaries (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    session TEXT NOT NULL,
    project TEXT,
    agent TEXT,
    origin TEXT NOT NULL CHECK (origin IN ('stop-hook', 'transcript')),
    native_event TEXT,
    transcript_path TEXT,
    text TEXT NOT NULL DEFAULT '',
    receipt_uid TEXT
);
CREATE INDEX proposal_boundaries_session ON proposal_boundaries(session, id);

-- One row per proposer pass that consumed a window: the cursor is max(to_line) per source.
CREATE TABLE proposal_passes (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    session TEXT,
    source TEXT NOT NULL,
    from_line INTEGER NOT NULL,
    to_line INTEGER NOT NULL,
    boundary_id INTEGER,
    window_chars INTEGER NOT NULL DEFAULT 0,
    drafts INTEGER NOT NULL DEFAULT 0,
    stored INTEGER NOT NULL DEFAULT 0,
    receipt_uid TEXT
);
CREATE INDEX proposal_passes_source ON proposal_passes(source, to_line);
CREATE INDEX proposal_passes_session ON proposal_passes(session, id);

-- A draft, as the proposer wrote it (after redaction and policies). Never rewritten: edits
-- and decisions are events.
CREATE TABLE proposals (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    session TEXT,
    project TEXT NOT NULL,
    agent TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('decision','constraint','fact','procedure','preference')),
    text TEXT NOT NULL,
    why TEXT NOT NULL DEFAULT '',
    confidence REAL,
    model TEXT,
    pass_id INTEGER REFERENCES proposal_passes(id),
    source TEXT,
    window_from INTEGER,
    window_to INTEGER,
    receipt_uid TEXT
);
CREATE INDEX proposals_session ON proposals(session, id);
CREATE INDEX proposals_project ON proposals(project, id);

-- The state machine, append-only: pending -> edited* -> approved | rejected.
CREATE TABLE proposal_events (
    id INTEGER PRIMARY KEY,
    proposal_id INTEGER NOT NULL REFERENCES proposals(id),
    time TEXT NOT NULL,
    from_state TEXT NOT NULL CHECK (from_state IN ('pending','edited')),
    to_state TEXT NOT NULL CHECK (to_state IN ('edited','approved','rejected')),
    actor TEXT,
    session TEXT,
    memory_id INTEGER REFERENCES memories(id),
    reason TEXT,
    text TEXT,
    kind TEXT CHECK (kind IS NULL OR kind IN ('decision','constraint','fact','procedure','preference')),
    scope TEXT CHECK (scope IS NULL OR scope IN ('agent','project','shared')),
    tell TEXT,
    CHECK ((to_state = 'approved') = (memory_id IS NOT NULL))
);
CREATE INDEX proposal_events_proposal ON proposal_events(proposal_id, id);
-- One decision per proposal, whatever races: a second approval cannot commit (nor its memory).
CREATE UNIQUE INDEX proposal_events_one_decision ON proposal_events(proposal_id)
    WHERE to_state IN ('approved', 'rejected');
-- A transition must start from the proposal's current state (the latest event's, else pending).
CREATE TRIGGER proposal_events_from_current BEFORE INSERT ON proposal_events
WHEN new.from_state IS NOT coalesce((SELECT to_state FROM proposal_events
                                     WHERE proposal_id = new.proposal_id ORDER BY id DESC LIMIT 1), 'pending')
BEGIN
    SELECT RAISE(ABORT, 'illegal proposal transition: not from the current state');
END;

CREATE TRIGGER proposal_boundaries_append_only_u BEFORE UPDATE ON proposal_boundaries BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER proposal_boundaries_append_only_d BEFORE DELETE ON proposal_boundaries BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER proposal_passes_append_only_u BEFORE UPDATE ON proposal_passes BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER proposal_passes_append_only_d BEFORE DELETE ON proposal_passes BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER proposals_append_only_u BEFORE UPDATE ON proposals BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER proposals_append_only_d BEFORE DELETE ON proposals BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER proposal_events_append_only_u BEFORE UPDATE ON proposal_events BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER proposal_events_append_only_d BEFORE DELETE ON proposal_events BEGIN SELECT RAISE(ABORT, 'append-only'); END;
""",
    ),
    (
        4,
        "search: per-term document frequencies, kept by a trigger (fts5vocab reads whole posting lists)",
        """
-- How many memories hold each stemmed term. The pre-step reads it on every prompt: fts5vocab
-- computes the same counts by walking each term's posting list, which costs milliseconds per
-- common term at 100k memories. Memory words never change (memories_no_rewrite) and memories
-- are never deleted, so the counts only ever grow; they match memories_vocab exactly.
CREATE TABLE term_stats (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO term_stats (term, df) SELECT term, doc FROM memories_vocab;
-- `terms` holds distinct porter stems (letters and digits only), space-separated.
CREATE TRIGGER memories_term_stats AFTER INSERT ON memories WHEN trim(new.terms) != '' BEGIN
    INSERT INTO term_stats (term, df)
    SELECT value, 1 FROM json_each('["' || replace(trim(new.terms), ' ', '","') || '"]') WHERE value != ''
    ON CONFLICT(term) DO UPDATE SET df = df + 1;
END;
""",
    ),
    (
        5,
        "threads: a memory may continue a thread (a conversation, a line of work) and follow its previous memory",
        """
-- A memory written into a thread (a conversation's session, an imported chat) follows the
-- thread's previous memory in the same project. Search reads a threaded memory together with
-- the one or two before it: a reply ("cinnamon knots and a lemon tart") is about what it answers.
ALTER TABLE memories ADD COLUMN thread TEXT;
ALTER TABLE memories ADD COLUMN follows INTEGER REFERENCES memories(id);
CREATE INDEX memories_thread ON memories(project, thread, id) WHERE thread IS NOT NULL;
CREATE INDEX memories_follows ON memories(follows) WHERE follows IS NOT NULL;
-- Where a memory sits is part of what it says: it never moves.
CREATE TRIGGER memories_no_rethread BEFORE UPDATE OF thread, follows ON memories BEGIN
    SELECT RAISE(ABORT, 'memories are immutable: supersede instead');
END;
""",
    ),
    (
        6,
        "embeddings: one sentence vector per memory, written by the daemon's embedding pass",
        """
-- A memory's sentence embedding (recalld.model.embed), written after the memory by the
-- daemon's embedding pass or `recalld embed --backfill`, never by the write itself (writes do
-- not wait for a model). Derived data: a vector is replaced when the embedder's model changes,
-- and a backfill can remake any of them. `model` names the weights (vectors of two models are
-- never compared); `vec` is `dim` little-endian float32s of unit length. `seq` grows with
-- every write, so a reader's cache reads only the rows after the last one it saw.
CREATE TABLE memory_vectors (
    memory_id INTEGER PRIMARY KEY REFERENCES memories(id),
    model TEXT NOT NULL,
    dim INTEGER NOT NULL CHECK (dim > 0),
    vec BLOB NOT NULL CHECK (length(vec) = 4 * dim),
    seq INTEGER NOT NULL UNIQUE
);
""",
    ),
    (
        7,
        "queue tiers: a queued memory is delivered whole or shown as a one-line tell",
        """
-- The judge's middle band (below its threshold, above the lower edge tells.judge_floor) is queued
-- as a tell: one line with the memory's id, which the agent opens when it matters. Rows
-- queued before this are whole, as they were.
ALTER TABLE queue ADD COLUMN tier TEXT NOT NULL DEFAULT 'whole' CHECK (tier IN ('whole', 'tell'));
""",
    ),
    (
        8,
        "team: membership log, outbox of events for the team's PostgreSQL, inbox of applied events, global ids",
        """
-- Which team this store syncs with, as append-only events: the latest 'join' after the last
-- 'leave' is the current one, with the projects 'share'd since. No password is ever stored:
-- conninfo is what libpq reads, the secret comes from PGPASSFILE or a service file;
-- read_conninfo, when set, is a read replica the pulls go to.
CREATE TABLE team_log (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN ('join', 'share', 'leave')),
    team TEXT,
    conninfo TEXT,
    read_conninfo TEXT,
    machine TEXT,
    project TEXT,
    project_key TEXT
);
-- A memory's global id, on every machine of the team: minted for a local write when it is
-- first queued, taken from the event for one that came from the team (local = 0).
CREATE TABLE team_uids (
    memory_id INTEGER PRIMARY KEY REFERENCES memories(id),
    uid TEXT NOT NULL UNIQUE,
    team TEXT NOT NULL,
    local INTEGER NOT NULL CHECK (local IN (0, 1)),
    machine TEXT,
    user TEXT,
    origin_time TEXT
);
-- Local writes to shared scopes as events (remember, supersede, retract), queued until pushed.
-- One row per (change, kind, memory): scanning the change log again queues nothing twice.
CREATE TABLE team_outbox (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    event_id TEXT NOT NULL UNIQUE,
    team TEXT NOT NULL,
    change_id INTEGER NOT NULL REFERENCES memory_changes(id),
    kind TEXT NOT NULL CHECK (kind IN ('remember', 'supersede', 'retract')),
    memory_uid TEXT NOT NULL,
    other_uid TEXT,
    project_key TEXT,
    body TEXT NOT NULL DEFAULT '{}',
    UNIQUE (team, change_id, kind, memory_uid)
);
-- An outbox event the team's server took (its sequence number there).
CREATE TABLE team_pushed (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    outbox_id INTEGER NOT NULL UNIQUE REFERENCES team_outbox(id),
    seq INTEGER
);
-- Cursors, as append-only rows (the latest per team counts): how far the change log was
-- turned into events, and how far the server's log was read.
CREATE TABLE team_cursors (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    team TEXT NOT NULL,
    cursor TEXT NOT NULL CHECK (cursor IN ('scan', 'pull')),
    position INTEGER NOT NULL,
    reason TEXT
);
CREATE INDEX team_cursors_team ON team_cursors(team, cursor, id);
-- Every event read from the team, applied once (event_id is unique): what it did here and the
-- memory it is about; `body` keeps a retraction's reason for when its memory arrives after it.
CREATE TABLE team_inbox (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    team TEXT NOT NULL,
    seq INTEGER NOT NULL,
    event_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (kind IN ('remember', 'supersede', 'retract')),
    memory_uid TEXT NOT NULL,
    other_uid TEXT,
    machine TEXT,
    user TEXT,
    origin_time TEXT,
    outcome TEXT NOT NULL,
    memory_id INTEGER,
    body TEXT
);
-- Every change to a memory that an event of the team wrote here: never queued back to it.
CREATE TABLE team_changes (
    change_id INTEGER PRIMARY KEY REFERENCES memory_changes(id),
    event_id TEXT NOT NULL
);
CREATE INDEX team_inbox_memory ON team_inbox(memory_uid);
CREATE INDEX team_inbox_other ON team_inbox(other_uid) WHERE other_uid IS NOT NULL;

CREATE TRIGGER team_log_append_only_u BEFORE UPDATE ON team_log BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER team_log_append_only_d BEFORE DELETE ON team_log BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER team_uids_append_only_u BEFORE UPDATE ON team_uids BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER team_uids_append_only_d BEFORE DELETE ON team_uids BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER team_outbox_append_only_u BEFORE UPDATE ON team_outbox BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER team_outbox_append_only_d BEFORE DELETE ON team_outbox BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER team_pushed_append_only_u BEFORE UPDATE ON team_pushed BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER team_pushed_append_only_d BEFORE DELETE ON team_pushed BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER team_cursors_append_only_u BEFORE UPDATE ON team_cursors BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER team_cursors_append_only_d BEFORE DELETE ON team_cursors BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER team_inbox_append_only_u BEFORE UPDATE ON team_inbox BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER team_inbox_append_only_d BEFORE DELETE ON team_inbox BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER team_changes_append_only_u BEFORE UPDATE ON team_changes BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER team_changes_append_only_d BEFORE DELETE ON team_changes BEGIN SELECT RAISE(ABORT, 'append-only'); END;
""",
    ),
    (
        9,
        "capture: a pending proposal said again in a later pass keeps that pass's provenance",
        """
-- A later pass drafted the same claim as a pending proposal: the draft is not stored twice,
-- but where it was said again (and how) is kept, so the proposal has every provenance. When
-- the later wording is the better one, `reworded` says the pass appended an 'edited' event
-- with it (only while the proposal was still untouched: a person's edit is never overridden).
CREATE TABLE proposal_sightings (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    proposal_id INTEGER NOT NULL REFERENCES proposals(id),
    pass_id INTEGER REFERENCES proposal_passes(id),
    session TEXT,
    source TEXT,
    window_from INTEGER,
    window_to INTEGER,
    uuid TEXT,
    kind TEXT,
    text TEXT NOT NULL,
    confidence REAL,
    reworded INTEGER NOT NULL DEFAULT 0 CHECK (reworded IN (0, 1))
);
CREATE INDEX proposal_sightings_proposal ON proposal_sightings(proposal_id, id);
CREATE TRIGGER proposal_sightings_append_only_u BEFORE UPDATE ON proposal_sightings BEGIN SELECT RAISE(ABORT, 'append-only'); END;
CREATE TRIGGER proposal_sightings_append_only_d BEFORE DELETE ON proposal_sightings BEGIN SELECT RAISE(ABORT, 'append-only'); END;
""",
    ),
    (
        10,
        "capture: each pass records the substantive turns it read (the session's proposal budget)",
        """
-- A session may be proposed from at the rate `proposals.per_20_turns` of its substantive turns
-- (proposer._room): what a pass read is kept with the pass, so the budget is a sum over the
-- session's passes and survives a restart of the daemon.
ALTER TABLE proposal_passes ADD COLUMN turns INTEGER NOT NULL DEFAULT 0;
""",
    ),
]
