"""cclx-bench: end-to-end benchmarks of cclx inside a model step.

    cclx-bench tp --preset llama3-8b            # one rank
    torchrun --nproc-per-node 8 -m cclx.bench tp --preset llama3-70b

    cclx-bench accuracy                         # FP8 collectives on trained models (CPU)
    torchrun --nproc-per-node 8 -m cclx.bench moe  # expert-parallel dispatch / combine

Subcommands: tp (decode and prefill of a tensor-parallel Llama-shaped model), accuracy (what
FP8 collectives cost a trained model's outputs, tensor parallel on CPU processes), moe
(expert-parallel dispatch and combine: cclx.moe next to the all-to-all a user writes).
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def build_parser() -> argparse.ArgumentParser:
    from . import accuracy, moe, tp

    p = argparse.ArgumentParser(prog="cclx-bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command")
    sub.required = True
    tp.build_parser(sub.add_parser("tp", help="tensor-parallel Llama decode/prefill"))
    accuracy.build_parser(sub.add_parser(
        "accuracy", help="FP8 collectives on trained models",
        description=accuracy.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    moe.build_parser(sub.add_parser("moe", help="expert-parallel dispatch and combine"))
    return p


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.command == "tp":
        from . import tp

        return tp.main(args=args)
    if args.command == "moe":
        from . import moe

        return moe.main(args=args)
    if args.command == "accuracy":
        from . import accuracy

        return accuracy.main(argv[1:])
    raise SystemExit(f"cclx-bench: unknown command {args.command!r}")
