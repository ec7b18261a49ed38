"""``sparklog --help`` and every command's help: plain text, and a line for every command
and action."""

from __future__ import annotations

import argparse
import subprocess
import sys

from sparklog.cli.command import build_parser


def _commands(
    parser: argparse.ArgumentParser, path: str = "sparklog"
) -> list[tuple[str, argparse.ArgumentParser, str | None]]:
    """(name, parser, its line in the parent's help) of every command under ``parser``."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            lines = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((f"{path} {name}", sub, lines.get(name)))
                found += _commands(sub, f"{path} {name}")
    return found


def test_every_command_and_action_has_help_text() -> None:
    commands = _commands(build_parser())
    assert len(commands) > 20
    missing = [name for name, sub, line in commands if not line or not sub.description]
    assert missing == []


def test_the_top_level_help_is_plain_text() -> None:
    out = subprocess.run([sys.executable, "-m", "sparklog.cli", "--help"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "``" not in out.stdout and ":class:" not in out.stdout
    for command in ("topics", "groups", "users", "acls", "broker", "cluster", "scheduler"):
        line = next(ln for ln in out.stdout.splitlines() if ln.strip().startswith(command))
        assert len(line.split()) > 1 or command == "scheduler", line  # the text beside it
