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
