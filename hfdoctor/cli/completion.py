"""`hfdoctor completion bash|zsh|fish`: a shell completion script, written from the argparse parsers.

The script is static text built from each command's parser (its options, their choices, which
take a file or a directory) and the rule registry (codes and names for --select, --ignore and
`explain`), so a new option completes without touching this module. It runs no hfdoctor at
completion time: a Tab costs the shell nothing. zsh loads the bash function through
bashcompinit, as many tools' zsh completions do.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable, Iterator

SHELLS = ("bash", "zsh", "fish")
# Options whose value is a path: files, or directories.
FILE_OPTIONS = {"--config", "--baseline", "--write-baseline", "--from", "--summary"}
DIRECTORY_OPTIONS = {"--upstream", "--repo"}
RULE_OPTIONS = {"--select", "--ignore"}


Makers = dict[str, Callable[[], argparse.ArgumentParser]]


@dataclass(frozen=True)
class CommandLine:
    """The parsers to complete (hfdoctor.cli.parsers hands them over: this module does not
    import it, as it is one of the commands there)."""

    commands: Makers
    summaries: dict[str, object]
    # Command words that only name commands: 'hook' -> {'install': ..., 'uninstall': ...}, 'webhook' -> ...
    groups: dict[str, Makers]

    def parsers(self) -> dict[str, argparse.ArgumentParser]:
        """'check' -> its parser; a group's commands as 'hook install'."""
        found = {name: make() for name, make in self.commands.items()}
        for group, commands in self.groups.items():
            found.update({f"{group} {name}": make() for name, make in commands.items()})
        return found


def _options(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:  # argparse's documented-in-practice list (shtab reads it too)
        if action.option_strings and action.help != argparse.SUPPRESS:
            yield action


def _rule_words() -> list[str]:
    from hfdoctor.lint.rules import ALL_RULES

    return [word for r in ALL_RULES for word in (r.code, r.name)]


def _value_words(action: argparse.Action) -> str | None:
    """What completes the value of an option: 'choices', 'file', 'dir', 'rules', or None (no value)."""
    if action.nargs == 0:
        return None
    if action.choices:
        return "choices"
    names = set(action.option_strings)
    if names & RULE_OPTIONS:
        return "rules"
    if names & DIRECTORY_OPTIONS:
        return "dir"
    if names & FILE_OPTIONS:
        return "file"
    return "text"


def _positional_choices(parser: argparse.ArgumentParser) -> list[str]:
    return [str(c) for a in parser._actions if not a.option_strings and a.choices for c in a.choices]


def bash_script(cli: CommandLine) -> str:
    commands = cli.parsers()
    top = [name for name in commands if " " not in name] + list(cli.groups)
    cases = []
    for name, parser in commands.items():
        words = " ".join(s for a in _options(parser) for s in a.option_strings)
        values = []
        for action in _options(parser):
            kind = _value_words(action)
            flags = "|".join(action.option_strings)
            if kind == "choices":
                words_of = " ".join(map(str, action.choices))
                values.append(f'        {flags}) COMPREPLY=($(compgen -W "{words_of}" -- "$cur")); return;;')
            elif kind == "rules":
                values.append(f'        {flags}) COMPREPLY=($(compgen -W "$rules" -- "$cur")); return;;')
            elif kind in ("file", "dir"):
                values.append(f'        {flags}) COMPREPLY=($(compgen -{kind[0]} -- "$cur")); return;;')
            elif kind == "text":
                values.append(f"        {flags}) return;;")
        choices = _positional_choices(parser)
        positional = ('COMPREPLY=($(compgen -W "$rules" -- "$cur"))' if name == "explain" else
                      f'COMPREPLY=($(compgen -W "{" ".join(choices)}" -- "$cur"))' if choices else
                      'COMPREPLY=($(compgen -d -- "$cur"))')
        cases.append(f'''    "{name}")
      case "$prev" in
{chr(10).join(values)}
      esac
      if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "{words}" -- "$cur")); else {positional}; fi;;''')
    group_lines = "\n".join(f'''  if [ "$command" = {group} ]; then
    if [ "$COMP_CWORD" -eq 2 ]; then COMPREPLY=($(compgen -W "{" ".join(members)}" -- "$cur")); return; fi
    command="{group} ${{COMP_WORDS[2]}}"
  fi''' for group, members in cli.groups.items())
    return f'''# hfdoctor completion for bash (`hfdoctor completion bash`)
_hfdoctor() {{
  local cur prev command rules
  cur="${{COMP_WORDS[COMP_CWORD]}}"
  prev="${{COMP_WORDS[COMP_CWORD-1]}}"
  rules="{" ".join(_rule_words())}"
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "{" ".join(top)} -h --help -V --version" -- "$cur")); return
  fi
  command="${{COMP_WORDS[1]}}"
{group_lines}
  case "$command" in
{chr(10).join(cases)}
  esac
}}
complete -o default -F _hfdoctor hfdoctor
'''


def zsh_script(cli: CommandLine) -> str:
    return ("# hfdoctor completion for zsh (`hfdoctor completion zsh`): the bash function, through bashcompinit\n"
            "autoload -U +X bashcompinit && bashcompinit\n" + bash_script(cli).split("\n", 1)[1])


def _fish_text(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish_script(cli: CommandLine) -> str:
    commands = cli.parsers()
    lines = ["# hfdoctor completion for fish (`hfdoctor completion fish`)", "complete -c hfdoctor -f",
             "complete -c hfdoctor -n __fish_use_subcommand -s V -l version -d 'Print the version'"]
    for name, summary in cli.summaries.items():
        doc = summary if isinstance(summary, str) else (summary.__doc__ or "").strip().splitlines()[0]
        lines.append(f"complete -c hfdoctor -n __fish_use_subcommand -a {name} -d {_fish_text(doc[:80])}")
    for group, members in cli.groups.items():
        lines.append(f"complete -c hfdoctor -n '__fish_seen_subcommand_from {group}; and not "
                     f"__fish_seen_subcommand_from {' '.join(members)}' -xa '{' '.join(members)}'")
    rules = " ".join(_rule_words())
    for name, parser in commands.items():
        words = name.split()
        condition = f"__fish_seen_subcommand_from {words[-1]}"
        if name == "explain":
            lines.append(f"complete -c hfdoctor -n '{condition}' -xa {_fish_text(rules)}")
        elif _positional_choices(parser):
            choices = " ".join(_positional_choices(parser))
            lines.append(f"complete -c hfdoctor -n '{condition}' -xa {_fish_text(choices)}")
        elif " " not in name:
            lines.append(f"complete -c hfdoctor -n '{condition}' -a '(__fish_complete_directories)'")
        for action in _options(parser):
            flags = " ".join(f"-l {s[2:]}" if s.startswith("--") else f"-s {s[1:]}" for s in action.option_strings)
            kind = _value_words(action)
            value = {"choices": f"-xa {_fish_text(' '.join(map(str, action.choices or ())))}",
                     "rules": f"-xa {_fish_text(rules)}", "file": "-rF",
                     "dir": "-xa '(__fish_complete_directories)'", "text": "-x"}.get(kind or "", "")
            help_text = (action.help or "").split(". ")[0].replace("%%", "%")[:80]
            lines.append(f"complete -c hfdoctor -n '{condition}' {flags} {value} -d {_fish_text(help_text)}".replace(
                "  ", " "))
    return "\n".join(lines) + "\n"


SCRIPTS: dict[str, Callable[[CommandLine], str]] = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}
