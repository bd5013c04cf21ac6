"""Numbered schema migrations. Append new ones; never edit one that has shipped.

PRAGMA user_version records the last applied number. Each migration runs in its own
transaction, so a crash leaves the database at a whole version.
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
]
