"""One error type for everything a user can get wrong.

The CLI turns an `EagleMiniError` into a single line on stderr and exit code 2; anything else is a
bug and keeps its traceback.
"""


class EagleMiniError(Exception):
    """Bad input or a missing asset: the message says what to do."""
