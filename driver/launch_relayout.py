"""The launcher's side of `triton_nmp.relayout` (re-layout when it pays), as a mixin of `NMPLauncher`:
pricing the re-layouts a launch offers, accruing each launch's gain and moving a tensor when its accrued
gain covers the move; activations (tensors some launch wrote whole) are marked and never moved.

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
        from triton_nmp.placement_registry import lookup_token

        tokens = {i: lookup_token(a.data_ptr, a.nbytes) for i, a in enumerate(args) if a is not None}
        whole = self._relayout_memo.get(("whole", id(fp)))
        if whole is None or whole[0] is not fp:
            whole = (fp, relayout.written_whole(fp.trace, {i: a.nbytes for i, a in enumerate(args) if a is not None}))
            self._relayout_memo[("whole", id(fp))] = whole
        for i in whole[1]:
            relayout.outputs.add(tokens.get(i))
        activations = frozenset(i for i, t in tokens.items() if t in relayout.outputs)
        where = tuple((a.placement.layout_signature(), a.placement.chosen, a.placement.provisional,
                       a.data_ptr - a.placement.origin, a.placement.extent, a.nbytes, i in activations)
                      if a is not None else None for i, a in enumerate(args))
        key = (id(spec), grid, self._scalars(vals), mapping, where)
        memo = self._relayout_memo.get(key)
        if memo is None:
            movable = relayout.candidates(fp.trace, args, lambda i, nbytes: moves_most_of(fp.trace, i, nbytes),
                                          activations)
            memo = offers_cached(self.metadata, fp.trace, grid, args, movable, mapping, spec) if movable else []
            if len(self._relayout_memo) > 64:
                self._relayout_memo.clear()
            self._relayout_memo[key] = memo
        if not memo:
            return None
        return tuple(((self._kernel_id, grid), tokens[o.arg], o) for o in memo)

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
            plm.assign(tensor, dataclasses.replace(offer.layout, origin=tensor.data_ptr(), chosen=True,
                                                   provisional=False),
                       why=(f"kernel '{self.kernel_name}': re-laid out, it pays: {launches} launch(es) of this kernel "
                            f"lost {acc:.0f} cycles to the old layout, the move costs {offer.move_cycles:.0f} "
                            f"(per launch {offer.cycles_now:.0f} -> {offer.cycles_then:.0f} cycles); {offer.reason}"),
                       name=f"{self.kernel_name}.{name}")
            moved = True
        if moved:
            self._last_place = None
