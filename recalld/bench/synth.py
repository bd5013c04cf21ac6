"""Synthetic but realistic coding-agent memories and prompts for latency benchmarks.

Deterministic (seeded) so two runs index the same store. Quality is measured on LoCoMo and
held-out data, not on this: it exists to give the index a realistic vocabulary and length mix.
"""

import random

COMPONENTS = ["billing", "auth", "ledger", "payments", "search", "ingest", "scheduler", "webhooks", "exports",
              "notifications", "reporting", "inventory", "checkout", "gateway", "importer", "sync", "cache",
              "migrations", "admin", "onboarding", "pricing", "audit", "tenancy", "metrics", "uploads"]
TECH = ["PostgreSQL", "SQLite", "Redis", "Celery", "alembic", "SQLAlchemy", "FastAPI", "pytest", "Docker",
        "Kubernetes", "nginx", "gunicorn", "Terraform", "GitHub Actions", "Kafka", "S3", "boto3", "pydantic",
        "httpx", "structlog", "mypy", "ruff", "uvicorn", "Stripe", "Sentry"]
ERRORS = ["OperationalError", "IntegrityError", "TimeoutError", "KeyError", "ConnectionResetError",
          "PermissionError", "ValidationError", "DeadlockDetected", "MemoryError", "RecursionError",
          "database is locked", "connection refused", "no such table", "certificate verify failed"]
VERBS = ["retries", "caches", "batches", "validates", "serialises", "shards", "throttles", "logs", "signs",
         "encrypts", "debounces", "streams", "rotates", "locks", "pins"]
REASONS = ["the upstream API rate-limits at 100 requests per minute", "the nightly job overlaps with backups",
           "a race between two workers corrupted rows in staging", "the vendor SDK leaks file handles",
           "tests must not touch the network", "the old schema stores cents as floats",
           "customers in the EU need data residency", "deploys happen from main only",
           "the legacy module is frozen until the audit ends", "mocking the clock hid a timezone bug"]
FLAGS = ["--dry-run", "--no-verify", "--force-with-lease", "-x", "--maxfail=1", "--reuse-db", "--frozen-lockfile"]
KINDS = ["decision", "constraint", "fact", "procedure", "preference"]


def _path(r: random.Random) -> str:
    comp = r.choice(COMPONENTS)
    return f"{r.choice(['src', 'app', 'lib', 'services'])}/{comp}/{r.choice(['models', 'api', 'tasks', 'legacy', 'utils', 'handlers'])}_{r.randint(1, 400)}.py"


def memory(r: random.Random) -> dict:
    comp, tech, err = r.choice(COMPONENTS), r.choice(TECH), r.choice(ERRORS)
    templates = [
        f"The {comp} service {r.choice(VERBS)} calls to {tech} because {r.choice(REASONS)}.",
        f"{err} in {_path(r)} means {r.choice(REASONS)}; fix by running the {comp} job with {r.choice(FLAGS)}.",
        f"Decision: {comp} moves from {tech} to {r.choice(TECH)} since {r.choice(REASONS)}. Do not revert.",
        f"Never edit {_path(r)} directly: {r.choice(REASONS)}. Wrap it in {comp}_adapter instead.",
        f"To reproduce the {comp} flake, run pytest {r.choice(FLAGS)} -k {comp}_{r.randint(1, 99)}; it fails with {err}.",
        f"The {comp}{r.choice(['Client', 'Manager', 'Worker', 'Repository'])}.{r.choice(['flush', 'commit', 'close', 'refresh'])}() "
        f"call {r.choice(VERBS)} silently when {tech} is down.",
    ]
    text = r.choice(templates)
    if r.random() < 0.3:
        text += " " + r.choice(templates)
    return {"text": text, "kind": r.choice(KINDS)}


def memories(n: int, seed: int = 7) -> list[dict]:
    r = random.Random(seed)
    return [memory(r) for _ in range(n)]


def prompts(n: int, seed: int = 11) -> list[str]:
    r = random.Random(seed)
    out = []
    for _ in range(n):
        comp, tech, err = r.choice(COMPONENTS), r.choice(TECH), r.choice(ERRORS)
        out.append(r.choice([
            f"Why does the {comp} job fail with {err} after the {tech} upgrade? Please fix it and add a test.",
            f"Refactor {_path(r)} so it no longer {r.choice(VERBS)} twice, and keep the API stable.",
            f"can you look at the {comp} flake again, it says {err} on CI",
            f"Add a --dry-run flag to the {comp} exporter and document it in the README.",
            "Write a haiku about autumn leaves and the smell of rain",
            f"We need to decide whether {comp} should keep using {tech}. What did we say last time?",
        ]))
    return out
