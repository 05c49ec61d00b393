"""The shell classifier's reader of ``git`` command lines.

``git`` with its global options (``-C DIR``, ``--no-pager``...) and a subcommand: the
read-only ones (``status``, ``log``, ``diff``, ``show``, ``blame``, ``ls-files``...) minus
their options that write a file or run a program (``--output``, ``--ext-diff``,
``--open-files-in-pager``, ``grep -O``), and the listing forms of ``branch``, ``tag``,
``config``, ``stash``, ``worktree``, ``remote``, ``reflog`` and ``notes``, are read-only;
any other subcommand or form is mutating (Codex's ``command_safety`` allows
``git status/log/diff/show/branch``).
"""

from __future__ import annotations

from typing import Final

from toolguard._types import MUTATING, READONLY, Effect

from ._words import Classifier, Unsafe, Word, parse_options
from ._words import option_spec as _spec

__all__ = ["read_git"]

_GIT_GLOBAL: Final = _spec("pP", "C", "no-pager paginate git-dir= work-tree= namespace= bare "
                           "no-replace-objects literal-pathspecs glob-pathspecs "
                           "noglob-pathspecs icase-pathspecs no-optional-locks exec-path")
# read-only subcommands -> long options (prefixes, as git accepts) that write or run a program
_GIT_READ: Final[dict[str, tuple[str, ...]]] = {
    **dict.fromkeys(("log", "show", "diff", "whatchanged", "shortlog", "diff-tree",
                     "diff-files", "diff-index", "range-diff", "format-rev"),
                    ("--output", "--ext-diff", "--open-files-in-pager")),
    "grep": ("--open-files-in-pager", "--ext-grep"),
    **dict.fromkeys(("status", "blame", "annotate", "ls-files", "ls-tree",
                     "rev-parse", "rev-list", "cat-file", "describe", "name-rev",
                     "merge-base", "show-ref", "for-each-ref", "count-objects", "check-ignore",
                     "check-attr", "check-ref-format", "var", "version", "show-branch",
                     "cherry", "verify-commit", "verify-tag"), ()),
}
_GIT_LISTING: Final[dict[str, tuple[frozenset[str], frozenset[str]]]] = {
    # subcommand -> (words that make it a listing, words that write)
    "stash": (frozenset({"list", "show"}), frozenset()),
    "worktree": (frozenset({"list"}), frozenset()),
    "remote": (frozenset({"-v", "--verbose", "show", "get-url"}), frozenset()),
    "reflog": (frozenset({"show"}), frozenset({"expire", "delete", "drop", "exists"})),
    "notes": (frozenset({"list", "show"}), frozenset()),
}
_BRANCH_LISTING: Final = frozenset({
    "--list", "-l", "--show-current", "-a", "--all", "-r", "--remotes", "-v", "-vv",
    "--verbose", "--merged", "--no-merged", "--no-color", "--color", "--contains",
    "--no-contains", "--points-at", "--column", "--no-column", "-i", "--ignore-case",
    "--omit-empty", "--abbrev", "--no-abbrev", "-av", "-avv", "-ra", "-rv", "-a -v"})
_CONFIG_READ: Final = frozenset({
    "--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list", "-l", "--show-origin",
    "--show-scope", "--global", "--local", "--system", "--worktree", "--null", "-z",
    "--name-only", "--includes", "--no-includes", "--bool", "--int", "--path",
    "--bool-or-int", "--expiry-date"})


def read_git(name: str, args: list[Word], script: Classifier, depth: int, appended: bool
         ) -> Effect | None:
    if any(not w.static for w in args[:1]):
        raise Unsafe
    parsed = parse_options(_GIT_GLOBAL, args, stop_at_operand=True)
    rest = parsed.operands
    if not rest:
        if any(o == "--exec-path" and v is not None for o, v in parsed.options):
            raise Unsafe
        return READONLY if parsed.options else MUTATING
    sub, tail = rest[0].text, rest[1:]
    if not rest[0].static:
        raise Unsafe
    denied = _GIT_READ.get(sub)
    if denied is not None:
        for word in tail:
            if word.option_like and sub != "status":
                raise Unsafe
            text = word.text
            if text.startswith("--"):
                option = text.partition("=")[0]
                if any(d.startswith(option) for d in denied) and len(option) > 2:
                    raise Unsafe
            elif sub == "grep" and text.startswith("-") and "O" in text:
                raise Unsafe  # -O<pager> runs a program
        return READONLY
    if sub == "branch":
        listing = any(w.text in ("--list", "-l") for w in tail)
        if all(w.static and (w.text in _BRANCH_LISTING
                             or w.text.startswith(("--format=", "--sort=", "--contains=",
                                                   "--merged=", "--points-at=", "--abbrev=",
                                                   "--color=", "--column="))
                             or (listing and not w.text.startswith("-"))) for w in tail):
            return READONLY
        raise Unsafe
    if sub == "tag":
        listing = not tail or any(w.text in ("-l", "--list") for w in tail)
        if listing and all(w.static and (w.text in ("-l", "--list", "-n", "--column",
                                                    "--no-column")
                                         or w.text.startswith(("--sort=", "--format=",
                                                               "--contains", "--points-at",
                                                               "--merged", "-n"))
                                         or not w.text.startswith("-")) for w in tail):
            return READONLY
        raise Unsafe
    if sub == "config":
        texts = [w.text for w in tail]
        if not all(w.static for w in tail):
            raise Unsafe
        options = [t for t in texts if t.startswith("-")]
        operands = [t for t in texts if not t.startswith("-")]
        if operands[:1] in (["get"], ["list"]):
            operands = operands[1:]
        if all(o in _CONFIG_READ or o.startswith("--type=") for o in options) and (
                len(operands) <= 1 or any(o.startswith("--get") for o in options)):
            return READONLY
        raise Unsafe
    lists = _GIT_LISTING.get(sub)
    if lists is not None:
        reads, _ = lists
        if not tail and sub in ("remote", "reflog"):
            return READONLY
        if tail and tail[0].text in reads and all(w.static for w in tail):
            return READONLY
        raise Unsafe
    return MUTATING
