"""Command-line parsing for the lesson scripts.

Introduced in 00_intro; used by every lesson script that takes arguments.

argparse answers bad input with a usage block and an error on two lines; ours says
what is wrong and how to launch the script right on one line, and exits with
status 2 like argparse does.
"""

import argparse
import math
import sys


class LessonArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line: what is wrong, and the command
    that launches the script right (`launch_hint`)."""

    def __init__(self, *args, launch_hint: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.launch_hint = launch_hint

    def error(self, message: str):
        sys.stderr.write(self.error_line(message))
        sys.exit(2)

    def error_line(self, message: str) -> str:
        return f"{self.prog}: {message}; launch it as: {self.launch_hint}\n"


def positive_int(text: str) -> int:
    """An argparse type for counts such as epochs and batch sizes: 1 or more."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def positive_number(unit: str):
    """An argparse type for a finite number of `unit` above 0 (seconds, MB, ...)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (value > 0 and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of {unit}")
        return value

    return parse


# For a timeout.
positive_seconds = positive_number("seconds")
