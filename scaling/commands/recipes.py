"""`scaling recipes`: the preset table (what each GEMM does, and the source)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", help="presets or recipe .toml files to show (default: all presets)")
    p.add_argument("--json", action="store_true", help="print JSON (full QuantSpec fields)")


def run(args: argparse.Namespace) -> int:
    from scaling.console import print_json, print_table
    from scaling.recipes import get_recipe, list_recipes

    recipes = [get_recipe(n) for n in dict.fromkeys(args.names or list_recipes())]  # (a name given twice: once)
    if args.json:
        print_json([r.to_dict() for r in recipes])
        return 0
    rows = [{"recipe": r.name, "fprop X·Wᵀ": r.describe_gemm("fprop"), "dgrad dY·W": r.describe_gemm("dgrad"),
             "wgrad dYᵀ·X": r.describe_gemm("wgrad"), "source": r.source} for r in recipes]
    if any(r.high_precision_blocks for r in recipes):  # transformer blocks the recipe leaves in BF16
        for row, r in zip(rows, recipes):
            row["BF16 blocks"] = ", ".join(map(str, r.high_precision_blocks)) or "none"
    print_table(rows, title="Recipes (operand: quantization along that GEMM's K)")
    return 0
