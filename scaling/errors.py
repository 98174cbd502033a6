"""The one exception type for mistakes a user can fix (bad TOML, unknown recipe, missing data).

The CLI prints its message as one line and exits with code 2; no traceback.
Torch-free, so fits/ and reports/ may raise it too.
"""


class UserError(Exception):
    """A problem in the user's input. The message names what is wrong and how to fix it."""
