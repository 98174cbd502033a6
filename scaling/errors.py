"""The one exception type for mistakes a user can fix (bad TOML, unknown recipe, missing data).

The CLI prints its message as one line and exits with code 2; no traceback.
Torch-free, so fits/ and reports/ may raise it too.
"""


class UserError(Exception):
    """A problem in the user's input. The message names what is wrong and how to fix it."""


def did_you_mean(name: str, known) -> str:
    """" (did you mean nvfp4?)" for a near miss of one of the `known` names (other letter case, or a
    misspelling difflib finds close), else ""."""
    import difflib

    known = list(known)
    close = ([k for k in known if k.lower() == name.lower()] or difflib.get_close_matches(name, known, n=1, cutoff=0.6)
             or difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.6))
    return f" (did you mean {close[0]}?)" if close else ""
