"""``halter cache info|clear``: what halter's cache holds (files, bytes, memos) and emptying it."""
from __future__ import annotations

import argparse
import json
from typing import Any

from halter import cache


def add_parser(sub: Any) -> None:
    p = sub.add_parser("cache", help="show or clear halter's cache (grammars, tables, tries, models)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["info", "clear"], help="info: report; clear: delete everything")
    p.add_argument("--json", action="store_true", help="info as JSON")
    p.set_defaults(func=run)


def _mb(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


def run(args: argparse.Namespace) -> int:
    if args.action == "clear":
        before = cache.info()
        cache.clear()
        print(f"removed {before['files']} files ({_mb(before['bytes'])}) from {before['directory']}")
        return 0
    info = cache.info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"directory  {info['directory']}")
    print(f"files      {info['files']} (limit {info['max_files']}, HALTER_CACHE_FILES)")
    print(f"bytes      {info['bytes']} = {_mb(info['bytes'])} (limit {_mb(info['max_bytes'])}, HALTER_CACHE_MB)")
    for kind, k in info["kinds"].items():
        print(f"  {kind:12s} {k['files']:6d} files  {_mb(k['bytes']):>12s}")
    return 0
