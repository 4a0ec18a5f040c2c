"""The launcher's side of `triton_nmp.relayout` (re-layout when it pays), as a mixin of `NMPLauncher`:
pricing the re-layouts a launch offers, accruing each launch's gain and moving a tensor when its accrued
gain covers the move, and writing an output where its reader moved the previous one (writer hints).

It reads the launcher's argument plan (`plan`, `_ptr_args`, `_scalars`), identity (`metadata`, `_kernel_id`,
`kernel_name`, `_mapping`) and memo (`_layout_memo`), and owns `_relayout_memo`. Offers are kept on disk for the
next process (`layout_cache.offers_cached`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from triton_nmp import relayout


class RelayoutSite:
    """Mixin: re-layout bookkeeping of one compiled kernel's launches."""

    def _relayout_offer(self, vals: tuple[int, ...], grid: tuple[int, int, int], spec: Any, mapping: str,
                        fp: Any) -> tuple[Any, ...] | None:
        """Per re-layout offered for the auto-laid-out tensors this launch reads (`triton_nmp.relayout`):
        (site, the tensor's registry token, `relayout.Offer`); None when there is none. Offers are
        memoised per kernel, footprint and placed layouts."""
        from triton_nmp import placement as plm
        from triton_nmp.auto_layout import moves_most_of
        from triton_nmp.layout_cache import offers_cached
        from triton_nmp.simulator.timing import ArgBuffer

        args: list[Any] = [None] * len(self.plan)
        for i, slot, name in self._ptr_args:
            ptr, nbytes = vals[slot], vals[slot + 1]
            if ptr and nbytes:
                args[i] = ArgBuffer(name, ptr, nbytes, plm.placement_of(ptr, nbytes))
        if not any(a is not None and a.placement.chosen for a in args):
            return None
        where = tuple((a.placement.layout_signature(), a.placement.chosen, a.placement.provisional,
                       a.data_ptr - a.placement.origin, a.placement.extent, a.nbytes) if a is not None else None
                      for a in args)
        key = (id(spec), grid, self._scalars(vals), mapping, where)
        memo = self._relayout_memo.get(key)
        if memo is None:
            movable = relayout.candidates(fp.trace, args, lambda i, nbytes: moves_most_of(fp.trace, i, nbytes))
            memo = offers_cached(self.metadata, fp.trace, grid, args, movable, mapping, spec) if movable else []
            if len(self._relayout_memo) > 64:
                self._relayout_memo.clear()
            self._relayout_memo[key] = memo
        if not memo:
            return None
        from triton_nmp.placement_registry import lookup_token

        return tuple(((self._kernel_id, grid), lookup_token(args[o.arg].data_ptr, args[o.arg].nbytes), o)
                     for o in memo)

    def _accrue(self, args: Sequence[Any], vals: tuple[int, ...], items: tuple[Any, ...]) -> None:
        """One launch's gains towards the re-layouts offered (`triton_nmp.relayout`); moves a tensor when
        its accrued gain covers its move."""
        from triton_nmp import placement as plm

        moved = False
        for site, token, offer in items:
            paid = relayout.ledger.accrue(site, token, offer)
            if paid is None:
                continue
            acc, launches = paid
            tensor = self._tensor_of(args, offer.arg)
            if tensor is None:
                continue
            name = next(n for j, _, n in self._ptr_args if j == offer.arg)
            relayout.hints.moved(token, offer.layout, offer.move_cycles, self.kernel_name)
            plm.assign(tensor, dataclasses.replace(offer.layout, origin=tensor.data_ptr(), chosen=True,
                                                   provisional=False),
                       why=(f"kernel '{self.kernel_name}': re-laid out, it pays: {launches} launch(es) of this kernel "
                            f"lost {acc:.0f} cycles to the old layout, the move costs {offer.move_cycles:.0f} "
                            f"(per launch {offer.cycles_now:.0f} -> {offer.cycles_then:.0f} cycles); {offer.reason}"),
                       name=f"{self.kernel_name}.{name}")
            moved = True
        if moved:
            self._last_place = None

    def _writer_site(self, vals: tuple[int, ...], grid: tuple[int, int, int], i: int, nbytes: int) -> tuple[Any, ...]:
        return (self._kernel_id, grid, self._scalars(vals), i, nbytes)

    def _apply_writer_hints(self, vals: tuple[int, ...], grid: tuple[int, int, int], spec: Any, fp: Any,
                            fixed: list[Any], auto: dict[int, tuple[int, int]], choices: dict[int, Any],
                            sparse: set[int]) -> None:
        """Write an output where its reader moved the previous one (`relayout.WriterHints`), when the timing
        model finds this launch slower by less than that move cost."""
        from triton_nmp.errors import NMPError
        from triton_nmp.simulator.timing import ArgBuffer, simulate_timing

        for i, c in list(choices.items()):
            if c.loaded or i in sparse:
                continue
            hint = relayout.hints.get(self._writer_site(vals, grid, i, auto[i][1]))
            if hint is None or hint.layout.layout_signature() == c.placement.layout_signature():
                continue
            key = ("hint", id(spec), grid, self._scalars(vals), i, hint.layout.layout_signature(),
                   tuple((a.placement.signature(), a.base, a.nbytes) if a is not None else None for a in fixed))
            extra = self._layout_memo.get(key)
            if extra is None:
                def cycles(layouts: dict[int, Any]) -> float:
                    full = list(fixed)
                    for j, pl in layouts.items():
                        full[j] = ArgBuffer("", auto[j][0], auto[j][1], pl)
                    return simulate_timing(fp.trace, grid, full, spec, mapping=self._mapping).cycles

                base = {j: ch.placement for j, ch in choices.items()}
                try:
                    extra = cycles({**base, i: dataclasses.replace(hint.layout, origin=auto[i][0])}) - cycles(base)
                except NMPError:  # a hint is an optimisation: the launch's own timing reports the error, named
                    extra = float("inf")
                self._layout_memo[key] = extra
            if extra < hint.move_cycles:
                choices[i] = dataclasses.replace(
                    c, placement=dataclasses.replace(hint.layout, origin=auto[i][0], chosen=True, provisional=False),
                    reason=(f"written where its reader '{hint.reader}' moved this site's previous output (the move "
                            f"cost {hint.move_cycles:.0f} cycles; writing it there costs this launch {extra:.0f})"))
