"""What the model layer raises. Its own module because resolution, the runtime and downloads
all raise these and none of them should import another just for an exception class."""


class LLMError(RuntimeError):
    """The model could not do what was asked (bad output, input too long, load failure)."""


class LLMTimeout(LLMError):
    """The call ran past its time limit (the work was stopped at its next check)."""


class LLMPreempted(LLMError):
    """A background generation (the proposer's) stopped so that an urgent call waiting for
    the model (the judge's, for the agent's next step) could run."""


class Unavailable(LLMError):
    """No usable model for this role; the message says why."""


class ModelFailed(Exception):
    """The model's worker process died, did not answer by its deadline, or answered what no
    model answers. Not an LLMError on purpose: what handles a model's own failure (a timeout
    that leaves candidates unjudged) must not take a dead worker for one; the pass that was
    waiting on it fails, with this message in its receipt. `detail`: how it ended (signal, exit
    status, the worker's last stderr lines), for the receipt and status."""

    outcome = "error"

    def __init__(self, message: str, detail: "dict | None" = None):
        super().__init__(message)
        self.detail = dict(detail or {})


class ModelCrashed(ModelFailed):
    """The worker exited (a signal, or an exit status) while a call was in flight."""


class ModelTimedOut(ModelFailed):
    """The worker did not answer within the call's deadline plus grace, and was killed."""

    outcome = "timeout"


class ModelGarbage(ModelFailed):
    """The worker answered with something that is not the call's result (it was killed)."""
