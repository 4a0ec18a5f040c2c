"""NMPLauncher: turns a Triton launch (grid + Python arguments) into one native call of the entry.

Triton creates one launcher per compiled kernel (`CompiledKernel._init_handles`) and calls it with
`(gx, gy, gz, stream, function, packed_metadata, launch_metadata, enter_hook, exit_hook, *args)`,
where `args` holds every parameter of the kernel in signature order, constexprs included. Everything
that depends only on the signature (which arguments are skipped, their kinds and integer ranges) is
planned once in `__init__`, so a launch only reads values and fills an int64 slot array.

Slot encoding (the ABI shared with the compiler): a pointer takes two slots [data_ptr, span_bytes],
an integer one slot (two's complement int64), a float one slot (the bits of the IEEE double).

Host-side tensor descriptors (`triton.tools.tensor_descriptor.TensorDescriptor`): the compiler runs
Triton's `rewrite_tensor_descriptor_to_pointer` pass, which turns a `tensordesc<T[B0, ..]>` parameter
of rank n into the parameters Triton's `decompose_descriptor` produces for targets without TMA:
the base pointer, shape (n x i64), strides (n x i64), padding-is-nan (i1), round_f32_to_tf32 (i1),
then shape again (n x i32) and strides again (n x i64). The plan holds one entry per such parameter
(so it lines up with the compiled ABI); the base entry marshals the whole descriptor, after checking
it against the signature and against the base tensor's bytes, and the field entries add nothing.

Simulated time: after the native run the launcher queues the launch on the device clock
(`driver.device.clock`, which times it lazily). Inside a benchmark loop (launches delimited by the
driver's `clear_cache()`), a launch identical to the one at the same position of the previous loop
iteration is replayed instead of executed; `driver.device` documents the exact rule.
"""

from __future__ import annotations

import dataclasses
import re
import struct
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from operator import index as _index
from operator import itemgetter
from typing import Any

import numpy as np

from triton_nmp import relayout
from triton_nmp.abi import KIND_DMA_LOAD, KIND_DMA_STORE, KIND_GATHER, KIND_SCATTER, metadata_value
from triton_nmp.errors import NMPLaunchError, NMPSpillWarning
from triton_nmp.simulator.runtime import (
    STATUS_OK,
    ArgInfo,
    KernelABI,
    LaunchResult,
    entry_function,
    make_slots,
    run_grid,
)
from triton_nmp.target import active_target, compiled_target

from . import launch_graph
from .device import PendingLaunch, clock
from .launch_relayout import RelayoutSite

__all__ = ["NMPLauncher", "ArgPlan", "plan_arguments", "INT_RANGES", "before_launch", "after_launch"]

# Observers of launches with a grid (the model-level placement pass captures a step's launches and applies
# its migrations through them): fn(launcher, args, slot values, grid), before placement and after the run.
before_launch: list[Any] = []
after_launch: list[Any] = []

PTR, INT, FLOAT, DESC = "ptr", "int", "float", "tensordesc"
DESC_FIELD = "descfield"  # a parameter the descriptor's base entry (DESC) fills in
_DESC_RE = re.compile(r"tensordesc<([A-Za-z0-9_]+)\[([0-9, ]*)\]")
_I32_MAX = (1 << 31) - 1

INT_RANGES: dict[str, tuple[int, int]] = {"i1": (0, 1), "u1": (0, 1)}
for _bits in (8, 16, 32, 64):
    INT_RANGES[f"i{_bits}"] = (-(1 << (_bits - 1)), (1 << (_bits - 1)) - 1)
    INT_RANGES[f"u{_bits}"] = (0, (1 << _bits) - 1)
_I64_MAX = (1 << 63) - 1
_TWO_64 = 1 << 64
_pack_d = struct.Struct("<d").pack
_unpack_q = struct.Struct("<q").unpack


@dataclass(frozen=True, slots=True)
class ArgPlan:
    """How to fetch and encode one non-constexpr, flattened parameter."""

    kind: str  # PTR | INT | FLOAT | DESC | DESC_FIELD
    index: int  # position in the launcher's *args
    sub: tuple[int, ...]  # path inside a tuple argument, () for a plain one
    name: str  # for messages: "x_ptr", or "pair[1]" inside a tuple
    ty: str  # the Triton type string, e.g. "*fp32", "i32"
    lo: int = 0  # integer range of the declared type
    hi: int = 0
    block: tuple[int, ...] = ()  # DESC: the block shape the kernel was specialised for

    @property
    def slots(self) -> int:
        return 2 if self.kind in (PTR, DESC) else 1

    @property
    def abi_kind(self) -> str:
        """The kind of the compiled parameter this entry stands for."""
        return {DESC: PTR, DESC_FIELD: INT}.get(self.kind, self.kind)

    @property
    def abi_ty(self) -> str:
        return "*" + self.ty[len("tensordesc<"):].split("[")[0] if self.kind == DESC else self.ty


def _kind_of(ty: str) -> str | None:
    if ty == "constexpr":
        return None
    if ty.startswith("*"):
        return PTR
    if ty.startswith("tensordesc"):
        return DESC
    if ty in INT_RANGES:
        return INT
    if ty.startswith(("fp", "bf")):
        return FLOAT
    raise NMPLaunchError(f"parameter type '{ty}' cannot be passed to an nmp kernel")


def _descriptor_plans(ty: str, index: int, sub: tuple[int, ...], name: str) -> list[ArgPlan]:
    """The base entry and the field entries of a `tensordesc<T[B0, ...]>` parameter, in the order
    of the parameters `rewrite_tensor_descriptor_to_pointer` gives the compiled kernel."""
    m = _DESC_RE.match(ty)
    if m is None or ",input_rank=" in ty or ty.startswith("tensordesc_im2col"):
        raise NMPLaunchError(f"argument '{name}': tensor descriptor type '{ty}' cannot be passed to an nmp kernel")
    block = tuple(int(b) for b in m.group(2).split(","))
    n = len(block)
    fields = ([(f"shape.{d}", "i64") for d in range(n)] + [(f"stride.{d}", "i64") for d in range(n)]
              + [("padding", "i1"), ("roundF32ToTF32", "i1")]
              + [(f"shape.{d}", "i32") for d in range(n)] + [(f"stride.{d}", "i64") for d in range(n)])
    plans = [ArgPlan(DESC, index, sub, name, ty, block=block)]
    plans += [ArgPlan(DESC_FIELD, index, sub, f"{name}.{f}", t) for f, t in fields]
    return plans


def plan_arguments(signature: dict[Any, Any]) -> list[ArgPlan]:
    """Flatten a Triton signature (name -> type string or nested tuple) into slot plans, skipping constexprs.
    A tensor descriptor becomes one entry per parameter of the compiled kernel (module docstring)."""
    plans: list[ArgPlan] = []

    def visit(ty: Any, index: int, sub: tuple[int, ...], name: str) -> None:
        if isinstance(ty, tuple | list):
            for j, t in enumerate(ty):
                visit(t, index, (*sub, j), f"{name}[{j}]")
            return
        kind = _kind_of(str(ty))
        if kind is None:
            return
        if kind == DESC:
            plans.extend(_descriptor_plans(str(ty), index, sub, name))
            return
        lo, hi = INT_RANGES.get(ty, (0, 0))
        plans.append(ArgPlan(kind, index, sub, name, str(ty), lo, hi))

    for i, (key, ty) in enumerate(signature.items()):
        visit(ty, i, (), key if isinstance(key, str) else f"arg{key}")
    return plans


class _Spans(Sequence[int]):
    """Byte spans per argument index, read from the marshalled values only when an error is decoded."""

    __slots__ = ("_vals", "_where")

    def __init__(self, vals: list[int], where: tuple[int, ...]):
        self._vals, self._where = vals, where

    def __len__(self) -> int:
        return len(self._where)

    def __getitem__(self, i: Any) -> Any:
        w = self._where[i]
        return self._vals[w] if w >= 0 else 0


class NMPLauncher(RelayoutSite):
    """Launch a compiled nmp kernel; `last_result` holds the counters of the most recent launch."""

    def __init__(self, src: Any, metadata: Any):
        import torch

        self._Tensor = torch.Tensor
        self.metadata = metadata
        abi = KernelABI.from_metadata(metadata)
        self.kernel_name = abi.name or getattr(src, "name", "") or "<kernel>"
        signature = dict(getattr(src, "signature", {}) or {})
        self.param_names = [k if isinstance(k, str) else f"arg{k}" for k in signature]
        self.plan = plan_arguments(signature)
        self._fetch = tuple(p for p in self.plan if p.kind != DESC_FIELD)  # a DESC entry fills its fields
        slot_of: list[int] = []
        span_at: list[int] = []
        n = 0
        for p in self.plan:
            slot_of.append(n)
            span_at.append(n + 1 if p.slots == 2 else -1)
            n += p.slots
        self.num_slots = n
        self.slot_offsets = tuple(slot_of)
        self._span_at = tuple(span_at)
        derived = tuple(ArgInfo(p.name, p.abi_kind, p.abi_ty) for p in self.plan)
        if not abi.args:
            abi = dataclasses.replace(abi, name=self.kernel_name, args=derived)
        else:
            theirs = [(a.kind, a.ty) for a in abi.args]
            ours = [(a.kind, a.ty) for a in derived]
            if [k for k, _ in theirs] != [k for k, _ in ours]:
                raise NMPLaunchError(
                    f"kernel '{self.kernel_name}': metadata nmp_args {theirs} does not match the launch "
                    f"signature {ours}; the compiler and the driver disagree on the argument ABI"
                )
        self.abi = abi
        # Timing bookkeeping, planned once: which slots hold pointers, and the kernel's identity.
        self._ptr_args = tuple(
            (i, slot_of[i], abi.args[i].name if i < len(abi.args) else p.name)
            for i, p in enumerate(self.plan)
            if p.slots == 2
        )
        ptr_slots = {slot + k for _, slot, _ in self._ptr_args for k in (0, 1)}
        scalar_slots = [j for j in range(self.num_slots) if j not in ptr_slots]
        self._scalars: Any = (lambda vals: ()) if not scalar_slots else itemgetter(*scalar_slots)
        self._kernel_id = metadata_value(metadata, "hash", None) or f"launcher@{id(self):x}"
        _warn_spilled(self.kernel_name, self._kernel_id, metadata)
        self._last_buffers: tuple[Any, Any, Any] | None = None
        self._last_place: tuple[Any, ...] | None = None
        self._layout_memo: dict[Any, Any] = {}
        self._relayout_memo: dict[Any, Any] = {}
        self._mapping = str(metadata_value(metadata, "pu_mapping", None) or "round_robin")
        self._spec = compiled_target(metadata)  # launches simulate the machine compiled for (None: the active one)
        self.last_result: LaunchResult | None = None
        self._bound_key: int | None = None
        self._fn: Any = None
        self._obj: Any = None

    # -- launch ----------------------------------------------------------------------------------

    def __call__(
        self,
        gridX: int,
        gridY: int,
        gridZ: int,
        stream: Any,
        function: int,
        kernel_metadata: Any,
        launch_metadata: Any,
        launch_enter_hook: Any,
        launch_exit_hook: Any,
        *args: Any,
    ) -> None:
        if launch_enter_hook is not None:
            launch_enter_hook(launch_metadata)
        vals = self.marshal(args)
        if function != self._bound_key or (self._obj is not None and self._obj.engine is None):
            self._bind(function)
        grid = (gridX, gridY, gridZ)
        if not (gridX > 0 and gridY > 0 and gridZ > 0):  # empty (or invalid) grid: not a launch
            self.last_result = run_grid(self._fn, make_slots(vals), grid, self.abi, (), self.metadata)
        else:
            spec = self._spec or active_target()
            tvals = tuple(vals)
            if before_launch:
                for fn in tuple(before_launch):
                    fn(self, args, tvals, grid)
            mapping, note, owner_trace = self._place(args, tvals, grid, spec)
            buffers, ident, where = self._buffers(tvals)
            # Identity of the launch (replay needs the very same call) and of its timing inputs (timing
            # depends on pointers only through placement, position in the placed range and size).
            launch_key = (self._kernel_id, function, grid, tvals, ident, id(spec), mapping)
            timing_key = (self._kernel_id, grid, self._scalars(vals), where, id(spec), mapping)
            graph = launch_graph.dispatch(self.kernel_name, grid)
            entry = clock.replay_entry(launch_key, timing_key, spec)
            if entry is not None:
                clock.replay(launch_key, entry, graph)
                self.last_result = LaunchResult(grid, STATUS_OK, dict(entry.counters), 0.0, None)
            else:
                result = run_grid(
                    self._fn, make_slots(vals), grid, self.abi, _Spans(vals, self._span_at), self.metadata, spec
                )
                self.last_result = result
                clock.submit(
                    launch_key,
                    PendingLaunch(
                        clock.next_seq(), self.kernel_name, timing_key, grid, self.metadata, spec, mapping,
                        buffers, result.counters, result.host_seconds, result.trace, note, graph, owner_trace,
                    ),
                )
        if after_launch:
            for fn in tuple(after_launch):
                fn(self, args, tuple(vals), grid)
        if launch_exit_hook is not None:
            launch_exit_hook(launch_metadata)

    def _place(self, args: Sequence[Any], vals: tuple[int, ...], grid: tuple[int, int, int],
               spec: Any) -> tuple[str, str, Any]:
        """Place the launch's host tensors (no placement yet, or place(t, "auto")) by the default policy
        and choose the mapping: (pu_mapping for the timing model, a note for the profile, the bound trace
        owner mappings follow or None).

        "auto" layouts and the "auto" mapping need the launch's static footprint
        (`triton_nmp.footprint`); when it depends on loaded data, layouts fall back to the default
        interleaving and the mapping to round robin, and the note says why. When only branches depend on
        data, the footprint's bound (both sides) is followed instead."""
        from triton_nmp import placement as plm

        stamp = _placements.stamp()
        last = self._last_place
        if last is not None and last[0] == vals and last[1] == stamp and last[2] is spec:
            if last[4] is not None:
                self._accrue(args, vals, last[4])
            return last[3]
        from triton_nmp.placement_registry import lookup_token

        policy = plm.default_policy()
        todo: dict[int, tuple[int, int]] = {}
        auto_requested: set[int] = set()
        provisional: dict[int, tuple[int, int]] = {}
        reusable: dict[int, tuple[int, int]] = {}  # replicated or provisional, whole: afresh if overwritten
        for i, slot, _ in self._ptr_args:
            ptr, nbytes = vals[slot], vals[slot + 1]
            if ptr and nbytes:
                pl = plm.lookup(ptr, nbytes)
                if pl is None or pl.policy == "auto":
                    todo[i] = (ptr, nbytes)
                    if pl is not None:
                        auto_requested.add(i)
                elif pl.origin == ptr and pl.extent == nbytes:
                    if pl.provisional:
                        provisional[i] = (ptr, nbytes)
                    if pl.chosen and (pl.provisional or (pl.policy == "replicated"
                                                         and lookup_token(ptr, nbytes) in relayout.laid_out)):
                        reusable[i] = (ptr, nbytes)
        mapping, note = self._mapping, ""
        relayout_on = relayout.enabled()
        need_fp = (mapping == "auto" or bool(provisional) or (todo and (policy == "auto" or auto_requested))
                   or relayout_on or bool(reusable))
        fp = None
        if need_fp:
            from triton_nmp.footprint import launch_footprint

            key = (grid, self._scalars(vals), tuple(vals[slot + 1] for _, slot, _ in self._ptr_args))
            fp = launch_footprint(self.metadata, self.abi.args, vals, grid, key)
            if mapping == "auto" and not fp.placeable:
                mapping = "round_robin"
                note = f"auto mapping -> round_robin: the footprint is not static ({fp.reason})"
            elif mapping == "auto" and not fp.exact:
                note = f"auto mapping from a bound of the footprint ({fp.reason}: both sides counted)"
            if fp.placeable and provisional:  # laid out provisionally: a launch that moves most of them decides
                from triton_nmp.auto_layout import moves_most_of

                settle = {i: v for i, v in provisional.items() if moves_most_of(fp.trace, i, v[1])}
                todo.update(settle)
                auto_requested.update(settle)
        fresh: frozenset[int] = frozenset()
        if fp is not None and fp.exact and reusable:  # its old contents are dead: laid out as if new, free
            fresh = self._overwritten(fp, {i: v[1] for i, v in reusable.items()})
            todo.update({i: reusable[i] for i in fresh})
            auto_requested.update(fresh)
            # a copy per bank cannot take stores: a replicated storage this launch writes only in part keeps
            # live bytes, so it is laid out again for this launch with its bytes moved (charged)
            replicas = {i for i in reusable if i not in fresh and plm.placement_of(*reusable[i]).policy == "replicated"}
            unreplicated = {i for i in replicas if self._stores(fp, i)}
            todo.update({i: reusable[i] for i in unreplicated})
            auto_requested.update(unreplicated)
        if todo:
            self._place_arguments(args, vals, grid, spec, todo, auto_requested, policy, fp, fresh)
        offer = self._relayout_offer(vals, grid, spec, mapping, fp) if relayout_on and fp is not None and \
            fp.placeable else None
        # a bound footprint (branches on data): programs are mapped by it, as hardware would before the run
        result = (mapping, note, fp.trace if fp is not None and fp.bound and fp.placeable else None)
        self._last_place = (vals, _placements.stamp(), spec, result, offer)
        if offer is not None:
            self._accrue(args, vals, offer)
        return result

    @staticmethod
    def _stores(fp: Any, i: int) -> bool:
        """Whether the footprint stores into pointer argument i."""
        return bool(((fp.trace[:, 2] == i) & np.isin(fp.trace[:, 0], (KIND_DMA_STORE, KIND_SCATTER))).any())

    def _overwritten(self, fp: Any, nbytes: dict[int, int]) -> frozenset[int]:
        """`relayout.overwritten` for this footprint, memoised per footprint and argument sizes."""
        key = ("overwritten", id(fp), tuple(sorted(nbytes.items())))
        memo = self._relayout_memo.get(key)
        if memo is None or memo[0] is not fp:
            memo = (fp, relayout.overwritten(fp.trace, nbytes))
            if len(self._relayout_memo) > 64:
                self._relayout_memo.clear()
            self._relayout_memo[key] = memo
        return memo[1]

    def _place_arguments(self, args: Sequence[Any], vals: tuple[int, ...], grid: tuple[int, int, int], spec: Any,
                         todo: dict[int, tuple[int, int]], auto_requested: set[int], policy: str, fp: Any,
                         fresh: frozenset[int] = frozenset()) -> None:
        from triton_nmp import placement as plm
        from triton_nmp.placement_registry import lookup_token
        from triton_nmp.simulator.timing import ArgBuffer

        choices: dict[int, Any] = {}
        auto = {i: v for i, v in todo.items() if policy == "auto" or i in auto_requested}
        if auto and fp is not None and fp.placeable:
            from triton_nmp.layout_cache import choose_checked_cached

            fixed: list[Any] = [None] * len(self.plan)
            for i, slot, name in self._ptr_args:
                ptr, nbytes = vals[slot], vals[slot + 1]
                if i not in todo and ptr and nbytes:
                    fixed[i] = ArgBuffer(name, ptr, nbytes, plm.placement_of(ptr, nbytes))
            # the same roles (kernel, footprint, which arguments are new, the others' layouts) get the same
            # layouts: a fresh output buffer per call is not a new decision
            key = (id(spec), grid, self._scalars(vals), tuple(sorted((i, v[1]) for i, v in auto.items())),
                   tuple((a.placement.signature(), a.base, a.nbytes) if a is not None else None for a in fixed))
            memo = self._layout_memo.get(key)
            if memo is None:
                memo = choose_checked_cached(self.metadata, fp.trace, grid, fixed, auto, spec)
                if len(self._layout_memo) > 64:
                    self._layout_memo.clear()
                self._layout_memo[key] = memo
            from triton_nmp.auto_layout import moves_most_of

            sparse = {i for i in memo if not moves_most_of(fp.trace, i, auto[i][1])}
            choices = {i: dataclasses.replace(c, placement=dataclasses.replace(
                c.placement, origin=auto[i][0], chosen=True, provisional=i in sparse),
                reason=f"{c.reason}; provisional: this launch moves less than half of its bytes" if i in sparse
                else c.reason) for i, c in memo.items()}
            choices.update(self._unreplicated_outputs(choices, auto, spec))
        for i, _slot, name in self._ptr_args:
            if i not in todo:
                continue
            tensor = self._tensor_of(args, i)
            if tensor is None:
                continue
            ptr, nbytes = todo[i]
            site = None  # a data-dependent launch's provisional output: tell `relayout.provisional_sites`
            old = plm.placement_of(ptr, nbytes)
            if old.provisional and i in choices and not choices[i].placement.provisional:
                relayout.provisional_sites.settled(lookup_token(ptr, nbytes), choices[i].placement)  # maker learns
            if i in fresh:
                c = choices.get(i)
                if c is None or (c.placement.layout_signature() == old.layout_signature() and not old.provisional):
                    continue
                plm.assign(tensor, c.placement, dead=True, name=f"{self.kernel_name}.{name}",
                           why=f"kernel '{self.kernel_name}': overwrites every byte, laid out afresh "
                               f"(was {old.describe()}, nothing to move): {c.reason}")
                relayout.laid_out.add(lookup_token(ptr, nbytes))
                continue
            if i in choices:
                c = choices[i]
                placement, why, loaded = c.placement, c.reason, c.loaded
                if old.policy == "replicated" and old.chosen:
                    why = (f"stores into it and a copy per bank cannot take stores: laid out again (was "
                           f"{old.describe()}, its live bytes moved): {why}")
            elif i in auto:
                if fp is not None and fp.placeable:
                    continue  # the kernel does not touch it: it stays host data
                site = (self._kernel_id, grid, i, nbytes)
                learned = relayout.provisional_sites.learned(site)
                pol, bank, gran = learned or ("interleaved", None, plm.DEFAULT_GRANULARITY)
                placement = plm.Placement(pol, bank, gran, nbytes, ptr, chosen=True, provisional=True)
                start = "the layout this argument was last settled in" if learned else "default interleaving"
                why = (f"auto -> {start} until a launch with a static footprint uses it: this launch's footprint "
                       f"is not static ({fp.reason if fp else ''})")
                loaded = True
            else:
                pol = policy
                stores = fp is not None and fp.exact and self._stores(fp, i)
                if pol == "replicated" and (stores or fp is None or not fp.exact):
                    pol = "interleaved"  # a copy per bank cannot take stores
                try:
                    plm._check_capacity(pol, nbytes, spec)
                except plm.NMPPlacementError:
                    pol = "interleaved"
                placement = plm.Placement(pol, None, plm.DEFAULT_GRANULARITY if pol == "interleaved" else None,
                                          nbytes, ptr)
                why, loaded = f"default policy '{policy}'", True
                if fp is not None and fp.exact:
                    loaded = bool(((fp.trace[:, 2] == i) & np.isin(fp.trace[:, 0], (KIND_DMA_LOAD, KIND_GATHER))).any())
            plm.assign(tensor, placement, copy=loaded, why=f"kernel '{self.kernel_name}': {why}",
                       name=f"{self.kernel_name}.{name}")
            if i in choices:
                relayout.laid_out.add(lookup_token(ptr, nbytes))
            elif site is not None:
                relayout.provisional_sites.made(lookup_token(ptr, nbytes), site)

    @staticmethod
    def _unreplicated_outputs(choices: dict[int, Any], auto: dict[int, tuple[int, int]], spec: Any) -> dict[int, Any]:
        """The choices that would replicate a provisional output of a data-dependent launch (an embedding lookup's
        row, made again every decode step), laid out as a small written tensor instead: a replicated layout is
        not learned for the launch that writes it (`relayout.ProvisionalSites`: its stores would go to every
        bank), so each new output would be re-laid out into a copy per bank again (GPT-2's embedding row, 9.4 us
        per step). Spread over every bank (or interleaved when larger), the layout is learned and nothing moves."""
        from triton_nmp import placement as plm
        from triton_nmp.auto_layout import spread_written
        from triton_nmp.placement_registry import lookup_token

        out = {}
        for i, c in choices.items():
            if c.placement.policy != "replicated" or not relayout.provisional_sites.made_here(lookup_token(*auto[i])):
                continue
            ptr, nbytes = auto[i]
            spread = spread_written(nbytes, spec)
            placement = (plm.Placement("blocked", None, None, nbytes, ptr, chosen=True) if spread else
                         plm.Placement("interleaved", None, plm.DEFAULT_GRANULARITY, nbytes, ptr, chosen=True))
            out[i] = dataclasses.replace(c, placement=placement, spread=spread, reason=(
                f"{'spread over every bank' if spread else 'interleaved'}, not replicated: a data-dependent launch "
                f"writes a new one every time and a copy per bank would be laid out again after each ({c.reason})"))
        return out

    def _tensor_of(self, args: Sequence[Any], i: int) -> Any:
        """The torch tensor behind pointer argument i (a descriptor's base), or None."""
        p = self.plan[i]
        v = args[p.index]
        try:
            for s in p.sub:
                v = v[s]
        except (TypeError, IndexError, KeyError):
            return None
        if p.kind == DESC:
            v = getattr(v, "base", None)
        if not isinstance(v, self._Tensor):
            v = getattr(v, "base", None)  # triton.TensorWrapper
        return v if isinstance(v, self._Tensor) and v.is_cpu else None

    def _buffers(self, vals: tuple[int, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]:
        """Per nmp argument (name, data_ptr, nbytes, placement), None for scalars; and per pointer its
        placement as key parts: (placement, origin) for the launch key, (placement, position inside
        the placed range, nbytes) for the timing key. Placements are read at launch time, so a later
        `place()` does not rewrite the history of queued launches. Repeating the previous launch's
        arguments under an unchanged placement registry costs one tuple comparison."""
        stamp = _placements.stamp()
        last = self._last_buffers
        if last is not None and stamp is not None and last[0] == vals and last[1] == stamp:
            return last[2]
        out: list[tuple[str, int, int, Any] | None] = [None] * len(self.plan)
        ident: list[Any] = []
        where: list[Any] = []
        lookup = _placements.lookup
        for i, slot, name in self._ptr_args:
            ptr, nbytes = vals[slot], vals[slot + 1]
            placement, pkey, origin = lookup(ptr, nbytes, stamp)
            out[i] = (name, ptr, nbytes, placement)
            ident.append((pkey, origin))
            where.append((pkey, ptr if origin is None else ptr - origin, nbytes))
        result = (tuple(out), tuple(ident), tuple(where))
        self._last_buffers = (vals, stamp, result)
        return result

    def _bind(self, function: int) -> None:
        """Find the entry for `function`: via the loaded object (resolving nmp_entry) or as a raw address."""
        from triton_nmp.simulator.loader import NMPLoadError, object_for_address

        obj = object_for_address(function) if function else None
        if obj is not None:
            address = obj.address(self.abi.entry) if self.abi.entry else function
        elif self.abi.entry:
            # Never call an address we cannot vouch for: after unload_module it points to freed code.
            raise NMPLoadError(
                f"kernel '{self.kernel_name}': function {function:#x} is not a loaded nmp object "
                f"(the module was unloaded or never loaded with NMPUtils.load_binary)"
            )
        else:  # no nmp_entry in the metadata: `function` is the entry address itself
            address = function
        if not address:
            raise NMPLaunchError(f"kernel '{self.kernel_name}' has no loaded code (function address 0)")
        self._fn = entry_function(address)
        self._obj = obj
        self._bound_key = function

    # -- argument marshalling ----------------------------------------------------------------------

    def marshal(self, args: Sequence[Any]) -> list[int]:
        """Encode the launch arguments into slot values (see the module docstring)."""
        if len(args) != len(self.param_names):
            raise NMPLaunchError(
                f"kernel '{self.kernel_name}' takes {len(self.param_names)} arguments "
                f"({', '.join(self.param_names)}), got {len(args)}"
            )
        Tensor = self._Tensor
        vals: list[int] = []
        append = vals.append
        for p in self._fetch:
            kind = p.kind
            v = args[p.index]
            if p.sub:
                v = self._descend(p, v)
            if kind == PTR:
                if isinstance(v, Tensor) and v.is_cpu and v.is_contiguous():
                    append(v.data_ptr())
                    append(v.numel() * v.element_size())
                else:
                    vals.extend(self._pointer(p, v))
            elif kind == INT:
                try:
                    x = _index(v)
                except TypeError:
                    raise self._error(p, f"expects an integer ({p.ty}), got {type(v).__name__}") from None
                if x < p.lo or x > p.hi:
                    raise self._error(p, f"value {x} does not fit its type {p.ty} (range [{p.lo}, {p.hi}])")
                append(x - _TWO_64 if x > _I64_MAX else x)
            elif kind == FLOAT:
                try:
                    append(_unpack_q(_pack_d(float(v)))[0])
                except (TypeError, ValueError):
                    raise self._error(p, f"expects a float ({p.ty}), got {type(v).__name__}") from None
            elif kind == DESC:
                vals.extend(self._descriptor(p, v))
        return vals

    def _error(self, p: ArgPlan, what: str) -> NMPLaunchError:
        return NMPLaunchError(f"kernel '{self.kernel_name}', argument '{p.name}': {what}")

    def _descend(self, p: ArgPlan, v: Any) -> Any:
        for s in p.sub:
            try:
                v = v[s]
            except (TypeError, IndexError, KeyError):
                raise self._error(p, f"expects a tuple matching the signature, got {type(v).__name__}") from None
        return v

    def _descriptor(self, p: ArgPlan, v: Any) -> list[int]:
        """[base, span, *shape, *strides, padding is nan, round to tf32, *shape, *strides] of a host
        TensorDescriptor, checked against the kernel's specialisation and against its base tensor's bytes
        (so every element the descriptor can reach is inside the tensor, and bounds checks never fire
        for the rows and columns a block hangs over: those are masked by the shape)."""
        fields = ("base", "shape", "strides", "block_shape")
        if not all(hasattr(v, f) for f in fields):
            raise self._error(p, f"expects a triton.tools.tensor_descriptor.TensorDescriptor ({p.ty}), "
                                 f"got {type(v).__name__}")
        n = len(p.block)
        try:
            shape, strides, block = ([_index(x) for x in getattr(v, f)] for f in fields[1:])
        except TypeError:
            raise self._error(p, "has a non-integer shape, stride or block_shape") from None
        if len(shape) != n or len(strides) != n:
            raise self._error(p, f"has rank {len(shape)} (shape {shape}, strides {strides}); the kernel was "
                                 f"compiled for rank {n} ({p.ty})")
        if tuple(block) != p.block:
            raise self._error(p, f"has block_shape {block}; the kernel was compiled for {list(p.block)} ({p.ty})")
        padding = getattr(v, "padding", "zero")
        if padding not in ("zero", "nan"):
            raise self._error(p, f"has padding {padding!r}; expected 'zero' or 'nan'")
        base = v.base
        dtype = _dtype_name(getattr(base, "dtype", None))
        if dtype is not None and dtype != p.abi_ty[1:]:
            raise self._error(p, f"has a base tensor of dtype {base.dtype}; the kernel was compiled for {p.ty}")
        if isinstance(base, self._Tensor) and base.is_cpu and base.is_contiguous():
            ptr, span = base.data_ptr(), base.numel() * base.element_size()
        elif base is None:
            raise self._error(p, "has no base tensor (base is None)")
        else:
            ptr, span = self._pointer(dataclasses.replace(p, name=f"{p.name}.base", ty=p.abi_ty), base)
        if any(d <= 0 or d > _I32_MAX for d in shape) or any(s < 0 for s in strides):
            raise self._error(p, f"has shape {shape} and strides {strides}; dimensions must be in [1, 2**31) "
                                 f"and strides non-negative")
        reach = (1 + sum((d - 1) * s for d, s in zip(shape, strides))) * base.element_size()
        if reach > span:
            raise self._error(p, f"shape {shape} with strides {strides} reaches {reach} bytes from the base, "
                                 f"but its base tensor holds only {span} bytes")
        flags = [int(padding == "nan"), int(bool(getattr(v, "round_f32_to_tf32", False)))]
        return [ptr, span, *shape, *strides, *flags, *shape, *strides]

    def _pointer(self, p: ArgPlan, v: Any) -> tuple[int, int]:
        """Slow path of pointer marshalling: None, wrappers, strided views and every error."""
        if v is None:
            return (0, 0)
        Tensor = self._Tensor
        base = getattr(v, "base", None)
        if not isinstance(v, Tensor) and isinstance(base, Tensor) and hasattr(v, "data_ptr"):
            v = base  # triton.TensorWrapper (reinterpreted dtype): the bytes are the base tensor's
        if not isinstance(v, Tensor):
            raise self._error(p, f"expects a torch.Tensor on the CPU ({p.ty}), got {type(v).__name__}")
        if not v.is_cpu:
            raise self._error(
                p, f"is a tensor on device '{v.device}'; nmp kernels run on CPU tensors (move it with .cpu())"
            )
        if v.numel() == 0:
            return (v.data_ptr(), 0)
        extent = 1
        for size, stride in zip(v.shape, v.stride()):
            if stride < 0:
                raise self._error(p, f"has a negative stride {tuple(v.stride())}; make it contiguous first")
            extent += (size - 1) * stride
        return (v.data_ptr(), extent * v.element_size())


_DTYPE_NAMES: dict[Any, str | None] = {}


def _dtype_name(dtype: Any) -> str | None:
    """Triton's name of a tensor dtype ("fp32", "i8", ...), as in a `tensordesc<...>` type; None if unknown."""
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        pass
    except TypeError:  # unhashable
        return None
    try:
        from triton._utils import canonicalize_dtype

        name = canonicalize_dtype(dtype)
    except (ImportError, KeyError, TypeError):
        name = None
    if len(_DTYPE_NAMES) < 256:
        _DTYPE_NAMES[dtype] = name
    return name


_SPILL_WARNED: set[str] = set()


def _warn_spilled(kernel: str, kernel_id: str, metadata: Any) -> None:
    """Once per compiled kernel and process (a compile or a load from Triton's cache): the tiles that did
    not fit the scratchpad and live in the PU's bank, with their Python lines."""
    spill = int(metadata_value(metadata, "nmp_spill_bytes", 0) or 0)
    if not spill or kernel_id in _SPILL_WARNED:
        return
    _SPILL_WARNED.add(kernel_id)
    tiles = "\n".join("    " + t for t in metadata_value(metadata, "nmp_spilled", ()) or ())
    peak = metadata_value(metadata, "nmp_spm_bytes", 0)
    warnings.warn(NMPSpillWarning(
        f"kernel '{kernel}': its tiles do not fit the scratchpad even with leaner buffers and strip-mining, so "
        f"these live in a spill area of {spill} bytes per program in the PU's own bank and move by DMA through "
        f"{peak} bytes of scratchpad (charged in the simulated time; the profile's 'spilled' column):\n{tiles}\n"
        f"Smaller BLOCK_* sizes avoid the traffic."), stacklevel=4)



class _PlacementCache:
    """Memoised `triton_nmp.placement.placement_of` lookups, valid while the placement registry is unchanged.

    A lookup walks the registry and builds a Placement (microseconds per pointer argument), which
    would dominate the launch bookkeeping. The cache is dropped whenever
    `placement.placement_generation()` changes (every place(), every placed tensor freed).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # launches from several threads share the cache
        self._module: Any = None  # None: not looked up yet; False: not installed
        self._generation: Any = None
        self._stamp: Any = None
        self._cache: dict[tuple[int, int], tuple[Any, Any, Any]] = {}

    def _load(self) -> Any:
        try:
            from triton_nmp import placement as mod
        except ImportError:
            self._module = False
            return False
        self._generation = getattr(mod, "placement_generation", None)
        self._module = mod
        return mod

    def stamp(self) -> Any:
        """The registry's current generation (None: unknown, or no placement module)."""
        mod = self._module
        if mod is None:
            mod = self._load()
        gen = self._generation
        return gen() if mod is not False and gen is not None else None

    def lookup(self, ptr: int, nbytes: int, stamp: Any) -> tuple[Any, Any, Any]:
        """(placement, hashable key, origin) of the buffer [ptr, ptr + nbytes) under registry
        generation `stamp`; (None, None, None) for null or empty buffers or without a placement module."""
        mod = self._module
        if mod is None:
            mod = self._load()
        if mod is False or not ptr or not nbytes:
            return None, None, None
        with self._lock:
            cache = self._cache
            if stamp is None or stamp != self._stamp or len(cache) > 4096:
                cache.clear()
                self._stamp = stamp
            hit = cache.get((ptr, nbytes))
        if hit is None:
            placement = mod.placement_of(ptr, nbytes)
            hit = (placement, _placement_key(placement), getattr(placement, "origin", None))
            with self._lock:
                if stamp is not None and stamp == self._stamp:  # still the registry it was read under
                    cache[(ptr, nbytes)] = hit
        return hit


def _placement_key(placement: Any) -> Any:
    """A plain (C-hashable) key for a placement's policy. `Placement.origin` is excluded (as from
    Placement's own equality): the launcher keys it, or the position relative to it, separately."""
    fields = ("policy", "bank", "granularity", "extent")
    if all(hasattr(placement, f) for f in fields):
        return tuple(getattr(placement, f) for f in fields)
    try:
        hash(placement)
    except TypeError:
        return repr(placement)
    return placement


_placements = _PlacementCache()
