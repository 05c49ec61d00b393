"""The walk of a Bash syntax tree for the shell classifier (:mod:`toolguard.shell._classifier`).

:class:`Walker` visits a tree-sitter-bash syntax tree with an allow-list of node kinds
(lists, pipelines, subshells and groups, ``if``/``while``/``for``/``case``, functions,
``[[ ]]``, assignments, redirections, here-documents, quoting, plain expansions, command and
process substitutions), turns each simple command's arguments into :class:`Word` values and
collects the effect :func:`~toolguard.shell._programs.classify_words` gives it. Whatever it
does not understand, and the first write, raise :class:`Unsafe`: the command is mutating.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from toolguard._types import MUTATING, READONLY, Effect

from ._programs import classify_words
from ._words import MAX_DEPTH, Classifier, Unsafe, Word, env_assignment_ok, output_target_ok

if TYPE_CHECKING:
    from tree_sitter import Node

__all__ = ["MAX_NODES", "Walker"]

MAX_NODES: Final = 2_000
"""Syntax-tree nodes walked before a command counts as mutating (too complex to classify;
the recorded read-only commands need at most ~110)."""
_MAX_NESTING: Final = 200  # syntax-tree depth walked (Python recursion)

_TOKENS: Final = frozenset({
    ";", "&", "&&", "||", "|", "|&", "(", ")", "{", "}", "!", "if", "then", "fi", "elif",
    "else", "while", "until", "do", "done", "for", "select", "in", "case", "esac", ";;", ";&",
    ";;&", "function", "\n",
})
_CONTAINERS: Final = frozenset({
    "program", "list", "pipeline", "subshell", "negated_command", "do_group", "else_clause",
    "elif_clause", "if_statement", "while_statement", "redirected_statement",
})
_OUTPUT_OPS: Final = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
_DUP_OPS: Final = frozenset({">&", "<&", ">&-", "<&-"})
_INPUT_OPS: Final = frozenset({"<"})
_EXPANSION_OPS: Final = frozenset({
    "${", "}", "#", "##", "%", "%%", "/", "//", "/#", "/%", ":-", "-", ":+", "+", ":?", "?",
    "^", "^^", ",", ",,",
})
_ARITHMETIC_TESTS: Final = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_DECLARE_OPTIONS: Final = frozenset("xrgaAlupfFt")
_GLOB: Final = re.compile(r"[*?\[]")
_ESCAPED: Final = re.compile(r"\\.", re.DOTALL)
# An unescaped backtick or $-expansion left inside a text node: a construct the grammar did
# not take apart (tree-sitter-bash reads `${x:-`cmd`}` as a plain word), so not understood.
_UNPARSED: Final = re.compile(r"(?:^|[^\\])(?:\\\\)*(?:`|\$[({\[A-Za-z0-9_@*#?$!-])")


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "surrogatepass")


def _checked(node: Node) -> str:
    """The text of a node that should hold no substitution; raises :class:`Unsafe` if it
    does (see ``_UNPARSED``)."""
    text = _text(node)
    if ("$" in text or "`" in text) and _UNPARSED.search(text):
        raise Unsafe
    return text


def _unescape(text: str, quoted: bool) -> str:
    r"""Backslash removal: unquoted, ``\x`` is ``x``; in double quotes only before
    ``$ ` " \`` and a newline."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "\n":
                i += 2
                continue
            if not quoted or nxt in '$`"\\':
                out.append(nxt)
                i += 2
                continue
        out.append(c)
        i += 1
    return "".join(out)


class Walker:
    """Walks a syntax tree, collecting the effect of every simple command in it; raises
    :class:`Unsafe` at the first construct it does not understand or the first write."""

    __slots__ = ("depth", "effects", "level", "nodes", "script")

    def __init__(self, depth: int, script: Classifier) -> None:
        self.depth = depth
        self.script = script
        self.effects: list[Effect | None] = []
        self.nodes = 0
        self.level = 0

    def enter(self) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES or self.level > _MAX_NESTING:
            raise Unsafe

    # -- statements --------------------------------------------------------------------------
    def stmt(self, node: Node) -> None:
        self.enter()
        kind = node.type
        if not node.is_named:
            if kind in _TOKENS:
                return
            raise Unsafe
        self.level += 1
        try:
            self._stmt(node, kind)
        finally:
            self.level -= 1

    def _stmt(self, node: Node, kind: str) -> None:
        if kind == "comment":
            return
        if kind in _CONTAINERS:
            for child in node.children:
                self.stmt(child)
        elif kind == "command":
            self.command(node)
        elif kind == "compound_statement":  # { ...; }, but never (( arithmetic ))
            if any(child.type == "((" for child in node.children):
                raise Unsafe
            for child in node.children:
                self.stmt(child)
        elif kind in ("variable_assignment", "variable_assignments"):
            self.assignments(node)
        elif kind == "declaration_command":
            self.declaration(node)
        elif kind == "unset_command":
            self.unset(node)
        elif kind == "test_command":
            for child in node.children:
                if child.is_named:
                    self.test(child)
                elif child.type not in ("[[", "]]", "[", "]"):
                    raise Unsafe
            self.effects.append(READONLY)
        elif kind in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
            self.redirect(node, kind)
        elif kind == "for_statement":
            self.for_statement(node)
        elif kind == "case_statement":
            self.case_statement(node)
        elif kind == "function_definition":
            for child in node.children:
                if child.type == "word":
                    continue  # the function's name
                self.stmt(child)
        else:
            raise Unsafe  # arithmetic, c-style for, ERROR, anything new

    def command(self, node: Node) -> None:
        words: list[Word] = []
        for child in node.children:
            kind = child.type
            if kind == "variable_assignment":
                self.assignment(child)
            elif kind in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                self.stmt(child)
            elif kind == "command_name":
                named = child.named_children
                if len(named) != 1:
                    raise Unsafe
                words.append(self.word(named[0]))
            elif child.is_named:
                words.append(self.word(child))
            else:
                raise Unsafe  # a stray $ or operator inside a command
        effect = classify_words(words, self.script, self.depth) if words else READONLY
        if effect is MUTATING:
            raise Unsafe
        self.effects.append(effect)

    def assignments(self, node: Node) -> None:
        if node.type == "variable_assignment":
            self.assignment(node)
        else:
            for child in node.named_children:
                self.assignment(child)
        self.effects.append(READONLY)  # shell state only

    def assignment(self, node: Node) -> None:
        """``NAME=value`` / ``NAME+=value`` / ``NAME=(a b)``: a name programs read only with
        a harmless value (:func:`env_assignment_ok`); no subscript (arithmetic)."""
        self.enter()
        children = node.children
        if node.type != "variable_assignment" or not children or \
                children[0].type != "variable_name":
            raise Unsafe
        value: Word | None = Word("")
        for child in children[1:]:
            if child.type in ("=", "+="):
                continue
            if child.type == "array":
                for element in child.named_children:
                    self.word(element)
                value = None
            elif child.is_named:
                value = self.word(child)
            else:
                raise Unsafe
        if not env_assignment_ok(_text(children[0]), value):
            raise Unsafe

    def declaration(self, node: Node) -> None:
        """``export``/``declare``/``local``/``readonly``/``typeset``: no ``-i`` (arithmetic)
        nor ``-n`` (a reference), plain names, allowed assignments."""
        for child in node.children:
            kind = child.type
            if not child.is_named:
                if kind in ("export", "declare", "local", "readonly", "typeset"):
                    continue
                raise Unsafe
            if kind == "variable_assignment":
                self.assignment(child)
            elif kind == "variable_name" or (kind == "word" and _text(child)[:1] in "-+" and \
                    set(_text(child)[1:]) <= _DECLARE_OPTIONS):
                continue
            else:
                raise Unsafe
        self.effects.append(READONLY)

    def unset(self, node: Node) -> None:
        for child in node.children:
            if child.type in ("unset", "unsetenv", "variable_name"):
                continue
            if child.type == "word" and _text(child) in ("-f", "-v", "-n"):
                continue
            if child.type == "word" and _text(child).isidentifier():
                continue
            raise Unsafe
        self.effects.append(READONLY)

    def test(self, node: Node) -> None:
        """An expression of ``[[ ]]``: string and file tests; an arithmetic comparison only
        of numbers (bash evaluates its operands as expressions: ``a[$(cmd)]`` runs cmd)."""
        self.enter()
        kind = node.type
        if kind in ("binary_expression", "unary_expression", "parenthesized_expression"):
            children = node.children
            operators = [_text(c) for c in children if c.type == "test_operator"]
            if any(op in _ARITHMETIC_TESTS for op in operators):
                if not all(c.type == "number" or (c.type == "word" and _text(c).isdigit())
                           for c in children if c.type != "test_operator"):
                    raise Unsafe
                return
            if "-v" in operators:
                if not all(c.type == "word" and _text(c).isidentifier()
                           for c in children if c.type != "test_operator"):
                    raise Unsafe
                return
            for child in children:
                if child.type == "test_operator":
                    continue
                if child.is_named:
                    self.test(child)
                elif child.type not in ("(", ")", "!", "&&", "||", "==", "=", "!=", "<", ">",
                                        "=~"):
                    raise Unsafe
            return
        self.word(node)

    def redirect(self, node: Node, kind: str) -> None:
        children = node.children
        if kind == "herestring_redirect":
            for child in children:
                if child.is_named:
                    self.word(child)
                elif child.type != "<<<":
                    raise Unsafe
            return
        if kind == "heredoc_redirect":
            quoted = False
            for child in children:
                ctype = child.type
                if ctype == "heredoc_start":
                    quoted = any(q in _text(child) for q in "'\"\\")
                elif ctype == "heredoc_body":
                    if not quoted:
                        self.heredoc_body(child)
                elif ctype in ("heredoc_end", "<<", "<<-"):
                    continue
                else:
                    self.stmt(child)  # `cat <<EOF > f | grep x`: the rest of the line
            return
        operator = ""
        for child in children:
            ctype = child.type
            if ctype == "file_descriptor":
                continue
            if not child.is_named:
                operator = ctype
                continue
            if operator in _DUP_OPS:
                if ctype == "number" or _text(child) == "-":
                    continue
                raise Unsafe  # >&file: both streams to a file
            target = self.word(child)
            if operator in _OUTPUT_OPS and not output_target_ok(target):
                raise Unsafe
            if operator not in _OUTPUT_OPS and operator not in _INPUT_OPS:
                raise Unsafe
        if operator not in _OUTPUT_OPS | _INPUT_OPS | _DUP_OPS:
            raise Unsafe

    def heredoc_body(self, node: Node) -> None:
        """An unquoted here-document expands its ``$(...)`` and ``${...}`` when it runs."""
        if not node.named_children:
            _checked(node)  # the grammar left `<<-` bodies whole
        for child in node.named_children:
            if child.type == "heredoc_content":
                _checked(child)
                continue
            self.word(child)

    def for_statement(self, node: Node) -> None:
        for child in node.children:
            kind = child.type
            if kind == "variable_name":
                if not env_assignment_ok(_text(child), None):
                    raise Unsafe
            elif kind == "do_group":
                self.stmt(child)
            elif child.is_named:
                self.word(child)
            elif kind not in _TOKENS:
                raise Unsafe

    def case_statement(self, node: Node) -> None:
        for child in node.children:
            if child.type == "case_item":
                in_body = False
                for part in child.children:
                    if part.type == ")" and not in_body:
                        in_body = True
                    elif not in_body:
                        if part.is_named and part.type != "extglob_pattern":
                            self.word(part)
                    else:
                        self.stmt(part)
            elif child.is_named:
                self.word(child)
            elif child.type not in _TOKENS:
                raise Unsafe

    # -- words -------------------------------------------------------------------------------
    def word(self, node: Node) -> Word:
        """The :class:`Word` of an argument node; substitutions in it are walked."""
        self.enter()
        self.level += 1
        try:
            return self._word(node)
        finally:
            self.level -= 1

    def _word(self, node: Node) -> Word:
        kind = node.type
        if kind == "word":
            raw = _checked(node)
            text = _unescape(raw, quoted=False)
            bare = _ESCAPED.sub("", raw) if "\\" in raw else raw  # unescaped characters only
            glob = _GLOB.search(bare) is not None and ("[" not in bare or "]" in bare) \
                and bare not in ("[", "[[", "]]", "]")
            brace = "{" in bare and ("," in bare or ".." in bare)
            if glob or brace:
                return Word(text, static=False, option_like=bare[:1] in "*?[{")
            return Word(text)
        if kind in ("number", "extglob_pattern", "regex"):
            return Word(_checked(node))
        if kind == "raw_string":
            return Word(_text(node)[1:-1])
        if kind == "ansi_c_string":
            raw = _text(node)
            if "\\" in raw:
                return Word(raw, static=False, option_like=True)
            return Word(raw[2:-1])
        if kind in ("string", "translated_string"):
            return self.string(node)
        if kind == "concatenation":
            parts = [self.word(child) for child in node.named_children]
            unquoted_expansion = any(
                child.type in ("simple_expansion", "expansion", "command_substitution")
                for child in node.named_children)
            return Word("".join(p.text for p in parts), all(p.static for p in parts),
                        bool(parts) and (parts[0].option_like or unquoted_expansion))
        if kind == "simple_expansion":
            return Word("\x00", static=False, option_like=True)
        if kind == "expansion":
            self.expansion(node)
            return Word("\x00", static=False, option_like=True)
        if kind == "command_substitution":
            self.substitution(node)
            return Word("\x00", static=False, option_like=True)
        if kind == "process_substitution":
            self.substitution(node)
            return Word("/dev/fd/\x00", static=False)
        if kind == "brace_expression":
            return Word("\x00", static=False, option_like=True)
        raise Unsafe  # arithmetic expansion, anything new

    def string(self, node: Node) -> Word:
        parts: list[str] = []
        static = True
        option_like = False
        for child in node.children:
            kind = child.type
            if not child.is_named:
                if kind in ('"', '$"'):
                    continue
                if kind == "$":
                    parts.append("$")
                    continue
                raise Unsafe
            if kind == "string_content":
                parts.append(_unescape(_checked(child), quoted=True))
                continue
            inner = self.word(child)
            if not parts or not "".join(parts):
                option_like = True  # "$x..." may start with -
            parts.append(inner.text)
            static = False
        return Word("".join(parts), static, option_like and not static)

    def expansion(self, node: Node) -> None:
        """``${x}``, ``${x:-word}``, ``${#x}``, ``${x/a/b}``...: no indirection (``${!x}``),
        transformation (``${x@P}`` runs the prompt expansion), substring (arithmetic) or
        subscript (arithmetic)."""
        for child in node.children:
            kind = child.type
            if not child.is_named:
                if kind not in _EXPANSION_OPS:
                    raise Unsafe
            elif kind in ("variable_name", "special_variable_name"):
                continue
            else:
                self.word(child)

    def substitution(self, node: Node) -> None:
        """``$(...)``, backticks, ``<(...)``: the commands inside run first."""
        if self.depth + 1 > MAX_DEPTH:
            raise Unsafe
        for child in node.children:
            if child.is_named:
                self.stmt(child)
            elif child.type not in ("$(", "`", ")", "<(", ">("):
                raise Unsafe
