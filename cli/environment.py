"""A command's ``--help`` lists the environment variables it reads, derived from the settings dataclasses it
builds (:func:`contract.settings.describe`): each with its default and meaning.

>>> from headroom.contract.topics import KafkaSettings
>>> print(environment_help(KafkaSettings).splitlines()[0])
environment (read at start; flags override):
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from headroom.contract.settings import describe

WIDTH = 100


def environment_help(*classes: type) -> str:
    """Every environment variable of ``classes``, once, in declaration order."""
    lines = ["environment (read at start; flags override):"]
    seen: set[str] = set()
    for cls in classes:
        for _, env, default, doc in describe(cls):
            if not env or env in seen:
                continue
            seen.add(env)
            shown = "''" if default == "" else str(default)
            lines += textwrap.wrap(f"{env} (default {shown}): {doc}", WIDTH, initial_indent="  ",
                                   subsequent_indent="      ")
    return "\n".join(lines)


def reads(*classes: type) -> dict[str, Any]:
    """``add_parser`` keywords that end a command's help with the environment variables of ``classes``."""
    return {"epilog": environment_help(*classes), "formatter_class": argparse.RawDescriptionHelpFormatter}
