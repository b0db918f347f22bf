"""argparse pieces shared by the command lines: a parser whose usage errors are one line, and value types."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

__all__ = ["OneLineErrorParser", "port_number", "positive_int"]


class OneLineErrorParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr -- ``<prog>: error: <what> (see --help)`` --
    and exit status 2, instead of the usage block followed by the error."""

    def error(self, message: str) -> NoReturn:
        """Print the one-line error and exit 2."""
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(2)


def port_number(text: str) -> int:
    """A TCP port: an integer from 1 to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: give a number from 1 to 65535") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {value}: give a number from 1 to 65535")
    return value


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}: give a whole number of at least 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is too small: give a whole number of at least 1")
    return value
