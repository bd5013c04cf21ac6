"""Team memory: the memories a user shares, replicated through the team's PostgreSQL.

SQLite stays the hot path: the hook never reads the network or imports this package. The
daemon's replicator (recalld/team/replicator.py) turns local writes to shared scopes into events
in an append-only outbox (recalld/team/outbox.py), pushes them, and applies the team's events to
the local store (recalld/team/inbox.py). docs/team.md is the design and the set-up.
"""
