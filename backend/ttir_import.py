"""Import Triton's printed TTIR into the project's SSA form (`backend.ir`), keeping source locations.

Triton's bindings cannot walk def-use chains, so the printed module is the dependable way in. TTIR
uses each dialect's custom assembly; rather than a regular expression per op, a tokenizer feeds a
recursive-descent parser: structural ops (functions, `scf.*`, the generic `"op"(...)` form) have
their own grammar, every other op is read as a flat list of pieces (operands, keywords, attribute
dictionaries, types) and a table of result-type rules decides what it produces. New ops whose syntax
follows the common shapes parse without code changes; anything else fails with the op and line.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from triton_nmp.errors import NMPCompilationError

from .ir import UNKNOWN_LOC, Block, Func, Loc, Module, Op, Region, Ty, Value

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>[ \t\r]+)
  | (?P<comment>//[^\n]*)
  | (?P<nl>\n)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<val>%[A-Za-z0-9_$.\-]+(?:\#\d+)?)
  | (?P<sym>@[A-Za-z0-9_$.\-]+|@"(?:[^"\\]|\\.)*")
  | (?P<alias>\#[A-Za-z0-9_.$\-]+)
  | (?P<blk>\^[A-Za-z0-9_]+)
  | (?P<num>-?0x[0-9A-Fa-f]+|-?\d+\.\d*(?:[eE][+-]?\d+)?|-?\d+(?:[eE][+-]?\d+)?)
  | (?P<ident>!?[A-Za-z_][A-Za-z0-9_.$]*)
  | (?P<arrow>->)
  | (?P<punct>[()\[\]{}<>,:=*?+\-|])
    """,
    re.VERBOSE,
)


@dataclass
class Tok:
    kind: str
    text: str
    line: int
    eol: bool = False  # last token on its line (distinguishes a region `{` from an attribute dict)


def tokenize(text: str, what: str = "TTIR") -> list[Tok]:
    toks: list[Tok] = []
    pos, line, n = 0, 1, len(text)
    while pos < n:
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            raise NMPCompilationError(f"cannot read {what} text near line {line}: {text[pos:pos + 40]!r}")
        kind = m.lastgroup
        tok_text = m.group()
        pos = m.end()
        if kind == "nl":
            if toks:
                toks[-1].eol = True
            line += 1
            continue
        if kind in ("ws", "comment"):
            continue
        if kind == "ident" and pos < n and text[pos] == "<":
            # `tensor<...>`, `dense<...>`, `!tt.ptr<...>`, `array<...>`: keep the bracketed body whole.
            depth, j = 0, pos
            while j < n:
                c = text[j]
                if c == '"':
                    j = text.index('"', j + 1)
                elif c == "<":
                    depth += 1
                elif c == ">" and text[j - 1] != "-":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            tok_text = text[m.start():j + 1]
            pos = j + 1
        toks.append(Tok(kind, tok_text, line))
    if toks:
        toks[-1].eol = True
    return toks


_INT_NAMES = {"i1", "i8", "i16", "i32", "i64"}


def parse_type(text: str) -> Ty:
    """Parse `i32`, `f16`, `!tt.ptr<f32>`, `tensor<32x32x!tt.ptr<f16>>` into a `Ty`."""
    text = text.strip()
    if text.startswith("tensor<") and text.endswith(">"):
        body = text[len("tensor<"):-1]
        shape = []
        while True:
            m = re.match(r"(\d+)x", body)
            if not m:
                break
            shape.append(int(m.group(1)))
            body = body[m.end():]
        elem = parse_type(body)
        if elem.shape:
            raise NMPCompilationError(f"nested tensor type {text}")
        return Ty(elem.elem, tuple(shape), elem.pointee)
    if text.startswith("!tt.ptr<") and text.endswith(">"):
        inner = text[len("!tt.ptr<"):-1].split(",")[0].strip()
        if inner.startswith("tensor<") or inner.startswith("!tt.ptr"):
            inner_ty = parse_type(inner)
            return Ty("ptr", (), str(inner_ty))
        return Ty("ptr", (), inner)
    if text in _INT_NAMES or text in ("f16", "bf16", "f32", "f64", "index") or text.startswith("f8"):
        return Ty("i64" if text == "index" else text)
    if text.startswith("!tt.tensordesc"):
        return Ty("tensordesc", (), text)
    raise NMPCompilationError(f"unsupported type '{text}' in TTIR")


def _parse_number(text: str, ty: str | None) -> int | float | bool:
    if text == "true":
        return True
    if text == "false":
        return False
    if text.lower().lstrip("-").startswith("0x"):
        bits = int(text, 16)
        if ty in ("f32",):
            return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
        if ty in ("f64",):
            return struct.unpack("<d", struct.pack("<Q", bits))[0]
        if ty == "f16":
            return struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0]
        if ty == "bf16":
            return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]
        return bits
    if any(c in text for c in ".eE") and not text.lower().startswith("0x"):
        return float(text)
    return int(text)


class _LocTable:
    """Resolves `loc(...)` expressions and `#locN` aliases to a file:line:col `Loc`."""

    def __init__(self) -> None:
        self.raw: dict[str, list[Tok]] = {}
        self.cache: dict[str, Loc] = {}

    def resolve_alias(self, name: str, depth: int = 0) -> Loc:
        if name in self.cache:
            return self.cache[name]
        toks = self.raw.get(name)
        loc = UNKNOWN_LOC if toks is None or depth > 50 else self.resolve(toks, depth + 1)
        self.cache[name] = loc
        return loc

    def resolve(self, toks: list[Tok], depth: int = 0) -> Loc:
        """`toks` is the inside of `loc(...)`."""
        if not toks:
            return UNKNOWN_LOC
        t0 = toks[0]
        if t0.kind == "alias":
            return self.resolve_alias(t0.text, depth)
        if t0.kind == "ident" and t0.text == "callsite":
            # callsite(callee at caller): report the caller, the line the user wrote.
            inner = toks[2:-1]
            for i, t in enumerate(inner):
                if t.kind == "ident" and t.text == "at":
                    caller = self.resolve(inner[i + 1:], depth)
                    return caller if caller.known else self.resolve(inner[:i], depth)
            return UNKNOWN_LOC
        if t0.kind == "ident" and t0.text == "fused":
            for t in toks:
                if t.kind == "alias":
                    loc = self.resolve_alias(t.text, depth)
                    if loc.known:
                        return loc
            return UNKNOWN_LOC
        if t0.kind == "str":
            if len(toks) >= 5 and toks[1].text == ":" and toks[2].kind == "num":
                col = int(toks[4].text) if toks[4].kind == "num" else 0
                return Loc(t0.text[1:-1], int(toks[2].text), col)
            if len(toks) >= 2 and toks[1].text == "(":
                return self.resolve(toks[2:-1], depth)  # a named location: "name"(inner)
        return UNKNOWN_LOC


class TTIRParser:
    def __init__(self, text: str):
        self.toks = tokenize(text)
        self.i = 0
        self.locs = _LocTable()
        self.values: dict[str, Value] = {}
        self._collect_loc_aliases()

    # -- token helpers -------------------------------------------------------------------------
    def peek(self, k: int = 0) -> Tok | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def next(self) -> Tok:
        t = self.peek()
        if t is None:
            raise NMPCompilationError("unexpected end of TTIR text")
        self.i += 1
        return t

    def at(self, text: str, k: int = 0) -> bool:
        t = self.peek(k)
        return t is not None and t.text == text

    def expect(self, text: str) -> Tok:
        t = self.next()
        if t.text != text:
            raise NMPCompilationError(f"TTIR line {t.line}: expected '{text}', found '{t.text}'")
        return t

    def skip_balanced(self) -> list[Tok]:
        """Consume a bracketed group starting at the current token; return its inner tokens."""
        open_t = self.next()
        pairs = {"(": ")", "[": "]", "{": "}", "<": ">"}
        close = pairs[open_t.text]
        depth, start = 1, self.i
        while depth:
            t = self.next()
            if t.text == open_t.text:
                depth += 1
            elif t.text == close:
                depth -= 1
        return self.toks[start:self.i - 1]

    def _collect_loc_aliases(self) -> None:
        toks, i = self.toks, 0
        keep: list[Tok] = []
        while i < len(toks):
            t = toks[i]
            if t.kind == "alias" and i + 3 < len(toks) and toks[i + 1].text == "=" and toks[i + 2].text == "loc":
                j, depth = i + 3, 0
                while True:
                    if toks[j].text == "(":
                        depth += 1
                    elif toks[j].text == ")":
                        depth -= 1
                        if depth == 0:
                            break
                    j += 1
                self.locs.raw[t.text] = toks[i + 4:j]
                i = j + 1
                continue
            keep.append(t)
            i += 1
        self.toks = keep

    def parse_loc(self) -> Loc:
        if self.at("loc") and self.at("(", 1):
            self.next()
            return self.locs.resolve(self.skip_balanced())
        return UNKNOWN_LOC

    def value(self, name: str, line: int) -> Value:
        v = self.values.get(name)
        if v is None:
            raise NMPCompilationError(f"TTIR line {line}: use of undefined value {name}")
        return v

    def define(self, name: str, ty: Ty, owner) -> Value:
        v = Value(name.lstrip("%"), ty, owner)
        self.values[name] = v
        return v

    # -- module structure ----------------------------------------------------------------------
    def parse_module(self) -> Module:
        mod = Module()
        self.expect("module")
        if self.at("attributes"):
            self.next()
            self.skip_balanced()
        self.expect("{")
        while not self.at("}"):
            t = self.peek()
            if t.text == "tt.func":
                mod.funcs.append(self.parse_func())
            else:
                raise NMPCompilationError(f"TTIR line {t.line}: unexpected '{t.text}' at module level")
        self.expect("}")
        self.parse_loc()
        if not mod.funcs:
            raise NMPCompilationError("TTIR module has no function")
        # the kernel (the public function) goes last: Triton prints its private callees after it
        mod.funcs.sort(key=lambda f: getattr(f, "public", True))
        return mod

    def parse_func(self) -> Func:
        self.expect("tt.func")
        public = True
        while self.peek().kind == "ident":
            public = self.next().text != "private"
        name = self.next().text.lstrip("@").strip('"')
        self.values = {}
        self.expect("(")
        args: list[Value] = []
        arg_locs: list[Loc] = []
        body = Block()
        while not self.at(")"):
            vname = self.next().text
            self.expect(":")
            ty = parse_type(self.next().text)
            attrs = {}
            if self.at("{"):
                attrs = self._attr_dict(self.skip_balanced())
            loc = self.parse_loc()
            v = self.define(vname, ty, body)
            v.attrs = attrs  # type: ignore[attr-defined]
            body.args.append(v)
            args.append(v)
            arg_locs.append(loc)
            if self.at(","):
                self.next()
        self.expect(")")
        result_types: list[Ty] = []
        if self.at("->"):
            self.next()
            if self.at("("):
                inner = self.skip_balanced()
                result_types = [parse_type(t.text) for t in inner if t.text != ","]
            else:
                result_types = [parse_type(self.next().text)]
        if self.at("attributes"):
            self.next()
            self.skip_balanced()
        self.expect("{")
        self.parse_ops(body)
        # Early returns make the body a CFG: `cf.cond_br`/`cf.br` to further blocks `^bbN(args):`.
        # They are kept by label in `func.cfg_blocks` for the lowering to structure.
        cfg_blocks: dict[str, Block] = {}
        while self.peek().kind == "blk":
            label = self.next().text
            block = Block()
            self._block_args(block)
            self.parse_ops(block)
            cfg_blocks[label] = block
        self.expect("}")
        loc = self.parse_loc()
        func = Func(name, args, arg_locs, body, loc, result_types)
        func.public = public  # type: ignore[attr-defined]
        func.cfg_blocks = cfg_blocks  # type: ignore[attr-defined]
        return func

    def _block_args(self, block: Block) -> None:
        """After a block label: `[(%a: type loc(...), ...)] :`, defining the block's arguments."""
        if self.at("("):
            self.next()
            while not self.at(")"):
                vname = self.next().text
                self.expect(":")
                ty = parse_type(self.next().text)
                self.parse_loc()
                block.args.append(self.define(vname, ty, block))
                if self.at(","):
                    self.next()
            self.expect(")")
        self.expect(":")

    def parse_ops(self, block: Block) -> None:
        while not self.at("}") and not self.peek().kind == "blk":
            block.ops.append(self.parse_op())

    def parse_region(self, arg_values: list[Value] | None = None) -> Region:
        """Parse `{ [^bb0(args):] ops }`; `arg_values` are block args declared by the op's header."""
        self.expect("{")
        block = Block(list(arg_values or []))
        for a in block.args:
            a.owner = block
        region = Region([block])
        if self.peek().kind == "blk":
            self.next()
            self._block_args(block)
        self.parse_ops(block)
        if self.peek().kind == "blk":
            raise NMPCompilationError(f"TTIR line {self.peek().line}: multi-block regions are not supported")
        self.expect("}")
        return region

    # -- ops -------------------------------------------------------------------------------------
    def parse_op(self) -> Op:
        first = self.peek()
        result_names: list[str] = []
        if first.kind == "val":
            while True:
                t = self.next()
                count = 1
                if self.at(":") and self.peek(1).kind == "num":
                    self.next()
                    count = int(self.next().text)
                if count == 1:
                    result_names.append(t.text)
                else:
                    result_names.extend(f"{t.text}#{k}" for k in range(count))
                if self.at(","):
                    self.next()
                    continue
                break
            self.expect("=")
        t = self.peek()
        line = t.line
        try:
            if t.kind == "str":
                op = self.parse_generic_op(result_names)
            elif t.text == "scf.for":
                op = self.parse_for(result_names)
            elif t.text == "scf.if":
                op = self.parse_if(result_names)
            elif t.text == "scf.while":
                op = self.parse_while(result_names)
            elif t.text in ("cf.br", "cf.cond_br"):
                op = self.parse_branch()
            else:
                op = self.parse_custom_op(result_names)
        except NMPCompilationError:
            raise
        except (ValueError, IndexError, KeyError, struct.error) as e:
            raise NMPCompilationError(f"cannot parse TTIR op '{t.text}' at TTIR line {line}: {e}") from e
        return op

    def _attr_value(self, toks: list[Tok]):
        if not toks:
            return None
        if toks[0].kind == "num" or toks[0].text in ("true", "false"):
            ty = toks[2].text if len(toks) > 2 and toks[1].text == ":" else None
            return _parse_number(toks[0].text, ty)
        if toks[0].kind == "str":
            return toks[0].text[1:-1]
        if toks[0].text.startswith("array<"):
            body = toks[0].text[len("array<"):-1]
            if ":" not in body:
                return ()
            return tuple(int(x) for x in body.split(":", 1)[1].split(",") if x.strip())
        return " ".join(t.text for t in toks)

    def _attr_dict(self, toks: list[Tok]) -> dict:
        out: dict = {}
        i = 0
        while i < len(toks):
            key = toks[i].text.strip('"')
            if i + 1 < len(toks) and toks[i + 1].text == "=":
                j, depth = i + 2, 0
                while j < len(toks) and not (depth == 0 and toks[j].text == ","):
                    if toks[j].text in "([{<":
                        depth += 1
                    elif toks[j].text in ")]}>":
                        depth -= 1
                    j += 1
                out[key] = self._attr_value(toks[i + 2:j])
                i = j + 1
            else:
                out[key] = True
                i += 2 if i + 1 < len(toks) and toks[i + 1].text == "," else 1
        return out

    def _types_until_region_or_loc(self) -> list[Tok]:
        out = []
        while not (self.at("loc") and self.at("(", 1)) and not (self.at("{") and self.peek().eol) and not self.at("}"):
            out.append(self.next())
        return out

    def parse_custom_op(self, result_names: list[str]) -> Op:
        name_tok = self.next()
        name = name_tok.text
        operands: list[Value] = []
        words: list[str] = []
        attrs: dict = {}
        consts: list[str] = []
        # Everything before the top-level ':' (operands, keywords, attribute dicts).
        while not self.at(":") and not (self.at("loc") and self.at("(", 1)) and not self.at("}"):
            t = self.peek()
            if t.kind == "val":
                self.next()
                operands.append(self.value(t.text, t.line))
            elif t.text == "{":
                attrs.update(self._attr_dict(self.skip_balanced()))
            elif t.text == "(" and name == "tt.return":
                self.skip_balanced()
            elif t.kind == "ident" and self.at("=", 1):
                key = self.next().text
                self.next()
                vt = [self.next()]
                if self.at(":") and self.peek(1).kind == "ident" and self.peek(1).text in _INT_NAMES | {"f32"}:
                    vt += [self.next(), self.next()]
                attrs[key] = self._attr_value(vt)
            elif t.kind == "num" or t.text.startswith("dense<"):
                self.next()
                consts.append(t.text)
            elif t.kind in ("ident", "str"):
                self.next()
                words.append(t.text)
            elif t.kind == "sym" and name == "tt.call":
                self.next()
                attrs["callee"] = t.text.lstrip("@").strip('"')
            else:
                self.next()  # punctuation: ',' and friends
        type_toks: list[Tok] = []
        if self.at(":"):
            self.next()
            type_toks = self._types_until_region_or_loc()
        if name == "tt.print":  # `tt.print " x: " {...} : %a, %b : T, U`: the operands follow the ':'
            operands += [self.value(t.text, t.line) for t in type_toks if t.kind == "val"]
        loc = self.parse_loc()
        op = Op(name, operands, [], attrs, [], loc)
        op.attrs["_words"] = words
        result_types = _custom_result_types(name, operands, words, consts, type_toks, attrs, len(result_names))
        if name == "arith.constant":
            ty = result_types[0]
            op.attrs["value"] = _constant_value(consts[0] if consts else words[0], ty)
        for rn, rt in zip(result_names, result_types):
            op.results.append(self.define(rn, rt, op))
        if len(result_names) != len(op.results):
            raise NMPCompilationError(f"TTIR line {name_tok.line}: cannot infer the result types of '{name}'")
        return op

    def parse_generic_op(self, result_names: list[str]) -> Op:
        name_tok = self.next()
        name = name_tok.text[1:-1]
        self.expect("(")
        operands = []
        while not self.at(")"):
            t = self.next()
            if t.kind == "val":
                operands.append(self.value(t.text, t.line))
        self.expect(")")
        attrs: dict = {}
        if self.at("<"):
            inner = self.skip_balanced()
            if inner and inner[0].text == "{":
                attrs.update(self._attr_dict(inner[1:-1]))
        regions: list[Region] = []
        if self.at("("):
            self.next()
            while not self.at(")"):
                if self.at(","):
                    self.next()
                    continue
                regions.append(self.parse_region())
            self.expect(")")
        if self.at("{"):
            attrs.update(self._attr_dict(self.skip_balanced()))
        self.expect(":")
        self.skip_balanced()  # operand types
        self.expect("->")
        if self.at("("):
            rtoks = self.skip_balanced()
            rtypes = [parse_type(t.text) for t in rtoks if t.text != ","]
        else:
            rtypes = [parse_type(self.next().text)]
        loc = self.parse_loc()
        op = Op(name, operands, [], attrs, regions, loc)
        for rn, rt in zip(result_names, rtypes):
            op.results.append(self.define(rn, rt, op))
        return op

    def parse_branch(self) -> Op:
        """`cf.br ^bb1(%a, %b : T, U)` / `cf.cond_br %c, ^bb1, ^bb2(%x : T)`: operands are the condition
        (cond_br) then each successor's arguments; attrs["successors"] lists (label, argument count)."""
        name = self.next().text
        operands: list[Value] = []
        successors: list[tuple[str, int]] = []
        if name == "cf.cond_br":
            t = self.next()
            operands.append(self.value(t.text, t.line))
            self.expect(",")
        while True:
            label = self.next().text
            n = 0
            if self.at("("):
                self.next()
                while not self.at(":") and not self.at(")"):
                    t = self.next()
                    if t.kind == "val":
                        operands.append(self.value(t.text, t.line))
                        n += 1
                while not self.at(")"):
                    self.next()  # the argument types
                self.expect(")")
            successors.append((label, n))
            if not self.at(","):
                break
            self.next()
        loc = self.parse_loc()
        return Op(name, operands, [], {"successors": successors}, [], loc)

    def _type_list(self) -> list[Ty]:
        if self.at("("):
            inner = self.skip_balanced()
            return [parse_type(t.text) for t in inner if t.text != ","]
        return [parse_type(self.next().text)]

    def parse_for(self, result_names: list[str]) -> Op:
        self.expect("scf.for")
        iv_name = self.next().text
        self.expect("=")
        lb = self.value(self.next().text, 0)
        self.expect("to")
        ub = self.value(self.next().text, 0)
        self.expect("step")
        step = self.value(self.next().text, 0)
        inits: list[Value] = []
        arg_names: list[str] = []
        if self.at("iter_args"):
            self.next()
            arg_names, inits = self._bindings()
        rtypes: list[Ty] = []
        if self.at("->"):
            self.next()
            rtypes = self._type_list()
        iv_ty = lb.type
        if self.at(":"):
            self.next()
            iv_ty = parse_type(self.next().text)
        op = Op("scf.for", [lb, ub, step, *inits])
        block_args = [Value(iv_name.lstrip("%"), iv_ty)] + [
            Value(n.lstrip("%"), v.type) for n, v in zip(arg_names, inits)
        ]
        for n, v in zip([iv_name, *arg_names], block_args):
            self.values[n] = v
        op.regions.append(_with_implicit_yield(self.parse_region(block_args)))
        if self.at("{"):  # `} {tt.num_stages = 2 : i32, ...}` from tl.range
            op.attrs.update(self._attr_dict(self.skip_balanced()))
        op.loc = self.parse_loc()
        for rn, rt in zip(result_names, rtypes):
            op.results.append(self.define(rn, rt, op))
        return op

    def parse_if(self, result_names: list[str]) -> Op:
        self.expect("scf.if")
        t = self.next()
        cond = self.value(t.text, t.line)
        rtypes: list[Ty] = []
        if self.at("->"):
            self.next()
            rtypes = self._type_list()
        op = Op("scf.if", [cond])
        op.regions.append(_with_implicit_yield(self.parse_region()))
        if self.at("else"):
            self.next()
            op.regions.append(_with_implicit_yield(self.parse_region()))
        else:
            op.regions.append(Region([Block([], [Op("scf.yield")])]))
        op.loc = self.parse_loc()
        for rn, rt in zip(result_names, rtypes):
            op.results.append(self.define(rn, rt, op))
        return op

    def _bindings(self) -> tuple[list[str], list[Value]]:
        """`(%a = %x, %b = %y)` of scf.for's iter_args and scf.while: the new names and their initial values."""
        names: list[str] = []
        values: list[Value] = []
        self.expect("(")
        while not self.at(")"):
            names.append(self.next().text)
            self.expect("=")
            t = self.next()
            values.append(self.value(t.text, t.line))
            if self.at(","):
                self.next()
        self.expect(")")
        return names, values

    def parse_while(self, result_names: list[str]) -> Op:
        self.expect("scf.while")
        names, inits = [], []
        if self.at("("):  # no carried values prints as `scf.while : () -> () {`
            names, inits = self._bindings()
        self.expect(":")
        self._type_list()
        self.expect("->")
        rtypes = self._type_list()
        op = Op("scf.while", inits)
        before_args = [Value(n.lstrip("%"), v.type) for n, v in zip(names, inits)]
        for n, v in zip(names, before_args):
            self.values[n] = v
        op.regions.append(self.parse_region(before_args))
        self.expect("do")
        op.regions.append(_with_implicit_yield(self.parse_region()))
        op.loc = self.parse_loc()
        for rn, rt in zip(result_names, rtypes):
            op.results.append(self.define(rn, rt, op))
        return op


def _with_implicit_yield(region: Region) -> Region:
    """MLIR omits `scf.yield` with no operands when printing; put it back so every body ends in one."""
    ops = region.block.ops
    if not ops or ops[-1].name != "scf.yield":
        ops.append(Op("scf.yield", [], [], {}, [], ops[-1].loc if ops else UNKNOWN_LOC))
    return region


def _constant_value(text: str, ty: Ty):
    if text.startswith("dense<"):
        body = text[len("dense<"):-1].strip()
        if body.startswith("["):
            items = [x.strip() for x in body.strip("[]").replace("[", "").replace("]", "").split(",")]
            return [_parse_number(x, ty.elem) for x in items if x]
        if body.startswith('"'):
            raise NMPCompilationError("hex-packed dense constants are not supported")
        return _parse_number(body, ty.elem)
    return _parse_number(text, ty.elem)


def _custom_result_types(name, operands, words, consts, type_toks, attrs, n_results) -> list[Ty]:
    """Result types of an op in custom assembly, from its trailing type list and its operands."""
    if n_results == 0:
        return []
    texts = [t.text for t in type_toks]
    # `A -> B` (splat, broadcast, expand_dims, reshape, trans, ...) and `A * B -> C` (dot).
    if "->" in texts:
        after = texts[texts.index("->") + 1:]
        if after and after[0] == "(":
            after = after[1:-1]
        tys = [parse_type(t) for t in after if t != ","]
        if len(tys) == 1 and n_results > 1:  # `%a, %b = tt.split %x : A -> B`: every result is a B
            tys = tys * n_results
        return tys
    # `A to B` (casts).
    if "to" in texts:
        return [parse_type(texts[texts.index("to") + 1])]
    tys = [parse_type(t) for t in texts if t not in (",", "(", ")")]
    if name in ("tt.addptr", "tt.advance") and tys:
        return [tys[0]]
    if name in ("arith.cmpi", "arith.cmpf"):
        base = tys[0] if tys else operands[0].type
        return [base.with_elem("i1")]
    if name == "tt.load":
        pt = tys[0] if tys else operands[0].type
        return [Ty(pt.pointee, pt.shape)]
    if name in ("tt.get_program_id", "tt.get_num_programs"):
        return [Ty("i32")]
    if name == "tt.unsplat":  # `tt.unsplat %t : tensor<1xT>` prints the operand's type; the result is T
        src = tys[0] if tys else operands[0].type
        return [Ty(src.elem, (), src.pointee)]
    if name == "arith.select" and tys:
        return [tys[-1]]
    if name == "arith.constant" and not tys:
        return [Ty("i1")]
    if tys:
        return [tys[-1]] * n_results if n_results > 1 and len(tys) == 1 else tys[-n_results:]
    if operands:
        return [operands[0].type]
    return []


def import_ttir(text: str) -> Module:
    """Parse TTIR text into a `Module`; the last function is the kernel."""
    return TTIRParser(text).parse_module()
