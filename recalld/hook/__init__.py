"""The hot path: `recalld hook EVENT`. Standard library only (and recalld.core)."""

# The input a hook takes, read by the hook process (recalld.hook.served: one byte more, so the
# run can refuse it) and checked by the run (recalld.hook.run); here so that neither imports the other.
MAX_INPUT = 32 * 1024 * 1024
