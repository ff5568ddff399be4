"""The one exception type the CLI turns into a single line on stderr."""


class EnvkitError(Exception):
    """Bad input or an unusable host: reported as one line, never a traceback.

    ``exit_code`` is 2 for bad input (the default) and 1 for "ran, but the answer
    is no" cases such as a stale render under ``--check`` or an empty report.
    """

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code
