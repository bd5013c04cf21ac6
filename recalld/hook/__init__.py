"""The hot path: `recalld hook EVENT`. Standard library only (and recalld.core)."""
