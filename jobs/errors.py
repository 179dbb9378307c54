"""The CLI's one error type, in a module of its own: a command module imports it without importing the CLI
(jobs/commands.py imports the parser, which imports each command's `add_parser`)."""


class UserError(Exception):
    """An error to print as one clear message, without a stack trace."""
