"""`triton-nmp cache ls|show KEY|clear [--yes]|export PATH`: inspect and manage the tuning cache.

Registered in `cli._SUBCOMMANDS` as "cache" -> (cmd_cache, args_cache). Entries are named by the
first hex digits of their id (any unique prefix works) or by kernel name.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

from triton_nmp.errors import NMPError
from triton_nmp.tuning.cache import Entry, TuningCache, stale_temp_age
from triton_nmp.tuning.configs import config_label
from triton_nmp.tuning.export import export_table

__all__ = ["args_cache", "cmd_cache"]

_ID_CHARS = 12


def args_cache(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default=None, metavar="DIR",
                        help="cache directory (default: $TRITON_NMP_TUNING_CACHE or ~/.cache/triton-nmp/tuning)")
    sub = parser.add_subparsers(dest="cache_action", metavar="ACTION", required=True)
    sub.add_parser("ls", help="one line per tuned launch key")
    show = sub.add_parser("show", help="every candidate of an entry, fastest first")
    show.add_argument("key", metavar="KEY", help="entry id (a unique prefix) or kernel name")
    clear = sub.add_parser("clear", help="delete every entry")
    clear.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    export = sub.add_parser("export", help="write one row per candidate as JSON or CSV (for placement passes)")
    export.add_argument("path", metavar="PATH")
    export.add_argument("--format", choices=("json", "csv"), default=None, help="default: by the file suffix")


def _seconds(x: float | None) -> str:
    if x is None:
        return "-"
    for factor, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if x >= factor:
            return f"{x / factor:.3g} {unit}"
    return f"{x * 1e9:.3g} ns"


def _kv(d: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in d.items()) or "-"


def _placement(sig: Any, full: bool = False) -> str:
    """A placement signature ([policy, bank, granularity]) as text: "bank3", "interleaved/1024B"."""
    if not isinstance(sig, list) or not sig:
        return str(sig)
    policy = sig[0]
    bank = sig[1] if len(sig) > 1 else None
    granularity = sig[2] if len(sig) > 2 else None
    if policy == "bank":
        return f"bank{bank}"
    if full and policy == "interleaved" and granularity:
        return f"interleaved/{granularity}B"
    return str(policy)


def _placements(d: dict[str, Any], full: bool = False) -> str:
    sep = " " if full else ","
    return sep.join(f"{k}{'=' if full else ':'}{_placement(v, full)}" for k, v in d.items()) or "-"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _ls(cache: TuningCache) -> int:
    entries = list(cache.entries())
    print(f"tuning cache {cache.directory}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}")
    stale = cache.stale_temp_files()
    if stale:
        size = sum(t.size for t in stale)
        print(f"{len(stale)} stale temporary file{'s' if len(stale) != 1 else ''} ({size / 1e6:.1f} MB) left by "
              f"killed writers, older than {stale_temp_age():.0f} s: the next store collects them "
              f"(or `triton-nmp cache clear`)")
    if not entries:
        return 0
    rows = [["ID", "KERNEL", "KEY", "PLACEMENTS", "TARGET", "BEST CONFIG", "TIME", "MEASURED/PREDICTED"]]
    for e in entries:
        sim = sum(c.simulated for c in e.candidates)
        pred = sum(c.predicted_seconds is not None for c in e.candidates)
        rows.append([e.id[:_ID_CHARS], e.key.kernel, _kv(e.key.key), _placements(e.key.placements), e.key.target,
                     config_label(e.best.config), _seconds(e.best.simulated_seconds), f"{sim}/{pred}"])
    print(_table(rows))
    return 0


def _select(cache: TuningCache, key: str) -> list[Entry]:
    found = cache.find(key)
    if not found:
        raise NMPError(f"no tuning cache entry '{key}' in {cache.directory} (see `triton-nmp cache ls`)")
    by_id = [e for e in found if e.id.startswith(key)]
    if len(by_id) > 1 and len(by_id) == len(found):
        ids = ", ".join(e.id[:_ID_CHARS] for e in by_id[:5])
        raise NMPError(f"'{key}' matches {len(by_id)} entries ({ids}...): give more digits")
    return found


def _show(cache: TuningCache, key: str) -> int:
    for n, e in enumerate(_select(cache, key)):
        if n:
            print()
        k = e.key
        when = datetime.datetime.fromtimestamp(e.created).isoformat(sep=" ", timespec="seconds")
        took = f", tuning took {e.tuning_seconds:.3g} s" if e.tuning_seconds else ""
        print(f"entry {e.id}\n  kernel {k.kernel} (source {k.source_hash[:16]}), triton-nmp {k.version}, "
              f"space {k.space}\n  target {k.target} ({k.target_hash[:16]})\n  key {_kv(k.key)}\n"
              f"  dtypes {_kv(k.dtypes)}\n  placements {_placements(k.placements, full=True)}\n"
              f"  tuned {when}{took}")
        order = sorted(range(len(e.candidates)), key=lambda i: (
            e.candidates[i].simulated_seconds is None, e.candidates[i].simulated_seconds or 0.0,
            e.candidates[i].predicted_seconds is None, e.candidates[i].predicted_seconds or 0.0))
        rows = [["", "CONFIG", "SIMULATED", "PREDICTED", "GRID", "NOTE"]]
        for i in order:
            c = e.candidates[i]
            rows.append(["*" if i == e.winner else "", config_label(c.config),
                         _seconds(c.simulated_seconds) if c.simulated else "(not run)", _seconds(c.predicted_seconds),
                         "x".join(map(str, c.grid)) if c.grid else "-", c.error or ""])
        print(_table(rows))
        if e.pruned:
            print(f"  pruned before measuring ({len(e.pruned)}):")
            for p in e.pruned:
                print(f"    {config_label(p.get('config', {}))}: {p.get('reason', '')}")
    return 0


def _clear(cache: TuningCache, yes: bool) -> int:
    count = sum(1 for _ in cache.entries())
    if not yes:
        if not sys.stdin.isatty():
            raise NMPError(f"refusing to delete {count} entries in {cache.directory} without --yes")
        answer = input(f"delete {count} tuning cache entries in {cache.directory}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 1
    removed = cache.clear()
    print(f"deleted {removed} file{'' if removed == 1 else 's'} from {cache.directory}")
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    """Dispatch `triton-nmp cache ACTION`."""
    cache = TuningCache(args.dir) if getattr(args, "dir", None) else TuningCache()
    action = args.cache_action
    if action == "ls":
        return _ls(cache)
    if action == "show":
        return _show(cache, args.key)
    if action == "clear":
        return _clear(cache, args.yes)
    if action == "export":
        try:
            rows = export_table(args.path, args.format, cache=cache)
        except (ValueError, OSError) as exc:
            raise NMPError(f"cannot export to {args.path}: {exc}") from None
        print(f"wrote {rows} rows to {args.path}")
        return 0
    raise NMPError(f"unknown cache action {action!r}")
