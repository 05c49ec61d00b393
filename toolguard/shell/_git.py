"""The shell classifier's reader of ``git`` command lines.

``git`` with its global options (``-C DIR``, ``--no-pager``...; not ``-c``,
``--config-env`` or ``--exec-path=DIR``) and a subcommand: the read-only ones (``status``,
``log``, ``diff``, ``show``, ``blame``, ``ls-files``...) minus their options that write a
file or run a program (``--output``, ``--ext-diff``, ``--textconv``, ``cat-file --filters``,
``--open-files-in-pager``, ``grep -O``, and any abbreviation git would take of them), and
the listing forms of ``branch``, ``tag``, ``config``, ``stash``, ``worktree``, ``remote``,
``reflog`` and ``notes`` (``stash show/list`` and ``reflog show`` take the log options, so
the same ones are denied there), are read-only; any other subcommand or form is mutating
(Codex's ``command_safety`` allows ``git status/log/diff/show/branch``).
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
# options of the log family (also `git stash show/list`, `git reflog show`) that write a file
# or run a program: --output=FILE, the external diff, textconv filters
_LOG_DENIED: Final = ("--output", "--ext-diff", "--textconv", "--open-files-in-pager")
# read-only subcommands -> long options (prefixes, as git accepts) that write or run a program
_GIT_READ: Final[dict[str, tuple[str, ...]]] = {
    **dict.fromkeys(("log", "show", "diff", "whatchanged", "shortlog", "diff-tree",
                     "diff-files", "diff-index", "range-diff", "format-rev"), _LOG_DENIED),
    "grep": ("--open-files-in-pager", "--ext-grep", "--textconv"),
    **dict.fromkeys(("blame", "annotate"), ("--textconv",)),
    "cat-file": ("--textconv", "--filters"),
    **dict.fromkeys(("status", "ls-files", "ls-tree",
                     "rev-parse", "rev-list", "describe", "name-rev",
                     "merge-base", "show-ref", "for-each-ref", "count-objects", "check-ignore",
                     "check-attr", "check-ref-format", "var", "version", "show-branch",
                     "cherry", "verify-commit", "verify-tag"), ()),
}
_EXACT: Final = frozenset({"--text"})  # an option of its own, though a prefix of --textconv
_GIT_LISTING: Final[dict[str, tuple[frozenset[str], tuple[str, ...]]]] = {
    # subcommand -> (words that make it a listing, the options denied after them)
    "stash": (frozenset({"list", "show"}), _LOG_DENIED),
    "worktree": (frozenset({"list"}), ()),
    "reflog": (frozenset({"show"}), _LOG_DENIED),
    "notes": (frozenset({"list", "show"}), ()),
}
_REMOTE_VERBOSE: Final = frozenset({"-v", "--verbose"})
_REMOTE_READ: Final = frozenset({"show", "get-url"})
_REMOTE_OPTIONS: Final = frozenset({"-n", "--push", "--all"})
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
    if not rest:  # `git --version`, `git --exec-path` (which prints it; =DIR is not allowed)
        return READONLY if parsed.options else MUTATING
    sub, tail = rest[0].text, rest[1:]
    if not rest[0].static:
        raise Unsafe
    denied = _GIT_READ.get(sub)
    if denied is not None:
        _check_options(tail, denied, lenient=sub == "status")
        if sub == "grep" and any(w.text.startswith("-") and not w.text.startswith("--")
                                 and "O" in w.text for w in tail):
            raise Unsafe  # -O<pager> runs a program
        return READONLY
    if sub == "remote":
        return _remote(tail)
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
        reads, listing_denied = lists
        if not tail and sub == "reflog":
            return READONLY
        if tail and tail[0].text in reads and all(w.static for w in tail):
            _check_options(tail[1:], listing_denied)
            return READONLY
        raise Unsafe
    return MUTATING


def _check_options(words: list[Word], denied: tuple[str, ...], lenient: bool = False) -> None:
    """Raises :class:`Unsafe` if one of ``words`` is a long option in ``denied`` or an
    abbreviation of one (git takes any unambiguous prefix: ``--outp=x``), or a word that
    may become an option when it runs (unless ``lenient``: a subcommand with no option that
    writes)."""
    for word in words:
        if not word.static and (word.text.startswith("-") or word.option_like) and not lenient:
            raise Unsafe
        option = word.text.partition("=")[0]
        if option.startswith("--") and len(option) > 2 and option not in _EXACT and any(
                d.startswith(option) for d in denied):
            raise Unsafe


def _remote(tail: list[Word]) -> Effect:
    """``git remote``, ``-v`` and ``show``/``get-url`` only: options may come before the
    sub-subcommand (``git remote -v add x y`` adds a remote)."""
    i = 0
    while i < len(tail) and tail[i].static and tail[i].text in _REMOTE_VERBOSE:
        i += 1
    rest = tail[i:]
    if not all(w.static for w in rest):
        raise Unsafe
    if not rest or (rest[0].text in _REMOTE_READ and all(
            w.text in _REMOTE_OPTIONS or not w.text.startswith("-") for w in rest[1:])):
        return READONLY
    raise Unsafe
