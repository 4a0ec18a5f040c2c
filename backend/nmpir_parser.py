"""Read nmpir text (what `nmpir.print_module` writes) back into a module: print -> parse -> print is
the identity, so passes can be tested on IR text (`tests/ir/`).

The grammar is the printer's, one op per line:

    nmp.func @name(%arg: type, ...) {
      %r, ... = op.name [fn] %a, %b [{key = value, ...}] [: type, ...] [loc("file":line:col)]
      %r = op.name %a : type {          an op with regions: each region is a block,
      ^bb(%x: type, ...):                 its arguments first;
        ...
      } {                                 the next region;
        ...
      }  loc("file":line:col)             the op's location after the last one
    }

Attribute values are integers, floats (`inf`, `nan`), `True`/`False`/`None`, bare words and quoted
strings (strings), and `[...]` (tuples). `//` comments (the scratchpad plan) are skipped. Tokens are
TTIR's (`ttir_import.tokenize`); types are TTIR's with `!nmp.tile<...>` for `tensor<...>`.
"""

from __future__ import annotations

import json

from triton_nmp.errors import NMPCompilationError

from .ir import UNKNOWN_LOC, Block, Func, Loc, Module, Op, Region, Ty, Value
from .nmpir import NOT_BARE
from .ttir_import import Tok, parse_type, tokenize

_WORDS = {"True": True, "False": False, "None": None, "inf": float("inf"), "nan": float("nan")}


def parse_nmpir_type(text: str) -> Ty:
    if text.startswith("!nmp.tile<"):
        text = "tensor<" + text[len("!nmp.tile<"):]
    return parse_type(text)


class _Parser:
    def __init__(self, text: str):
        self.toks = tokenize(text, "nmpir")
        self.i = 0
        self.values: dict[str, Value] = {}

    # -- tokens ---------------------------------------------------------------------------------------
    def peek(self, k: int = 0) -> Tok | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def at(self, text: str, k: int = 0) -> bool:
        t = self.peek(k)
        return t is not None and t.text == text

    def next(self) -> Tok:
        t = self.peek()
        if t is None:
            raise self.error("unexpected end of the text")
        self.i += 1
        return t

    def more(self) -> bool:
        """Whether the current line goes on (an op is one line up to its regions)."""
        return self.i > 0 and not self.toks[self.i - 1].eol and self.peek() is not None

    def expect(self, text: str) -> Tok:
        t = self.next()
        if t.text != text:
            raise NMPCompilationError(f"nmpir line {t.line}: expected '{text}', found '{t.text}'")
        return t

    def error(self, msg: str) -> NMPCompilationError:
        t = self.peek() or (self.toks[-1] if self.toks else None)
        return NMPCompilationError(f"nmpir line {t.line if t else 0}: {msg}")

    # -- values ---------------------------------------------------------------------------------------
    def define(self, name: str, ty: Ty, owner) -> Value:
        if name in self.values:
            raise self.error(f"%{name} is defined twice")
        v = Value(name, ty, owner)
        self.values[name] = v
        return v

    def use(self) -> Value:
        t = self.next()
        if t.kind != "val":
            raise NMPCompilationError(f"nmpir line {t.line}: expected a value, found '{t.text}'")
        try:
            return self.values[t.text[1:]]
        except KeyError:
            raise NMPCompilationError(f"nmpir line {t.line}: {t.text} is used before it is defined") from None

    def typed_args(self, owner) -> list[Value]:
        """`(%a: type, ...)` -> values defined with those types."""
        self.expect("(")
        out = []
        while not self.at(")"):
            name = self.next().text[1:]
            self.expect(":")
            out.append(self.define(name, parse_nmpir_type(self.next().text), owner))
            if self.at(","):
                self.next()
        self.expect(")")
        return out

    # -- module ---------------------------------------------------------------------------------------
    def module(self) -> Module:
        funcs = []
        while self.peek() is not None:
            self.expect("nmp.func")
            name = self.next().text[1:]
            body = Block()
            body.args = self.typed_args(body)
            self.expect("{")
            self.ops_until_close(body)
            self.expect("}")
            funcs.append(Func(name, body.args, [UNKNOWN_LOC] * len(body.args), body))
        return Module(funcs)

    def ops_until_close(self, block: Block) -> None:
        while not self.at("}"):
            block.ops.append(self.op())

    def op(self) -> Op:
        names = []
        if self.peek().kind == "val":
            while True:
                names.append(self.next().text[1:])
                if not self.at(","):
                    break
                self.next()
            self.expect("=")
        head = self.next()
        op = Op(head.text)
        attrs: dict = {}
        if self.more() and self.peek().kind == "ident" and not self.at("loc"):
            attrs["fn"] = self.next().text
        while self.more() and self.peek().kind == "val":
            op.operands.append(self.use())
            if self.at(","):
                self.next()
        if self.more() and self.at("{") and not self.peek().eol:
            attrs.update(self.attr_dict())
        op.attrs = attrs
        types = []
        if self.more() and self.at(":"):
            self.next()
            types.append(self.next().text)
            while self.at(","):
                self.next()
                types.append(self.next().text)
        if len(types) != len(names):
            raise NMPCompilationError(f"nmpir line {head.line}: {head.text} names {len(names)} results "
                                      f"but has {len(types)} result types")
        if self.more() and self.at("{"):
            self.next()
            op.regions = self.regions()
        op.loc = self.loc() if self.more() else UNKNOWN_LOC
        op.results = [self.define(n, parse_nmpir_type(t), op) for n, t in zip(names, types)]
        return op

    def regions(self) -> list[Region]:
        out = []
        while True:
            block = Block()
            if self.peek().kind == "blk":
                self.next()
                block.args = self.typed_args(block)
                self.expect(":")
            self.ops_until_close(block)
            self.expect("}")
            out.append(Region([block]))
            if not (self.more() and self.at("{")):
                return out
            self.next()

    def loc(self) -> Loc:
        if not self.at("loc"):
            return UNKNOWN_LOC
        self.next()
        self.expect("(")
        file = json.loads(self.next().text)
        self.expect(":")
        line = int(self.next().text)
        self.expect(":")
        col = int(self.next().text)
        self.expect(")")
        return Loc(file, line, col)

    # -- attributes -----------------------------------------------------------------------------------
    def attr_dict(self) -> dict:
        self.expect("{")
        out = {}
        while not self.at("}"):
            key = self.next().text
            self.expect("=")
            out[key] = self.attr_value()
            if self.at(","):
                self.next()
        self.expect("}")
        return out

    def attr_value(self):
        t = self.next()
        if t.text == "[":
            items = []
            while not self.at("]"):
                items.append(self.attr_value())
                if self.at(","):
                    self.next()
            self.expect("]")
            return tuple(items)
        if t.text == "-" and self.at("inf"):
            self.next()
            return float("-inf")
        if t.kind == "num":
            return float(t.text) if any(c in t.text for c in ".eE") else int(t.text)
        if t.kind == "str":
            return json.loads(t.text)
        if t.text in _WORDS:
            return _WORDS[t.text]
        if t.kind == "ident" and t.text not in NOT_BARE:
            return t.text
        raise NMPCompilationError(f"nmpir line {t.line}: cannot read attribute value '{t.text}'")


def parse_module(text: str) -> Module:
    """nmpir text -> module (not verified: call `nmpir.verify` to check it)."""
    return _Parser(text).module()
