"""Types for the verbs' numeric options: argparse refuses a bad value before the verb starts (one line,
exit 2, naming the option), so each verb need not check it again after parsing."""

from __future__ import annotations

import argparse
from typing import Callable


def integer(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse `type`: a whole number of at least `minimum` (`--bootstrap`, `--seed`, `--workers`),
    and at most `maximum` where one is given."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be {maximum} or less, got {value}")
        return value

    return parse
