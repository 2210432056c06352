"""The exceptions of the public API.

Every error a person can cause (bad text, a broken checkpoint folder) is a
``LabError``; its message says what is wrong and what to do.
"""


class LabError(Exception):
    """Base class of every error the library raises on purpose."""


class InputError(LabError, ValueError):
    """The text to translate cannot be used as it is (empty, too long, ...)."""


class CheckpointError(LabError):
    """A checkpoint folder is missing a file, or a file is truncated or does not match."""


class ResumeError(LabError, ValueError):
    """A training run's saved state cannot be resumed (unreadable, from another model, or inconsistent)."""


def not_utf8(path: object, exc: UnicodeDecodeError) -> InputError:
    """The error for a text file that is not UTF-8, naming it (a bare UnicodeDecodeError names no file)."""
    return InputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})")


class FetchError(LabError, RuntimeError):
    """Data a command needs (a Debian package, a wheel) could not be fetched or unpacked; the message names the
    step that failed and what to do instead."""
