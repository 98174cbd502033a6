"""`scaling diagnose`: quantization error per format x transform on synthetic or user tensors."""

from __future__ import annotations

import argparse
import math
import sys

from scaling.options import integer

MAX_ELEMENTS = 2**26  # per synthetic tensor (256 MB in float32; each is copied a few times per format)
SEED_MAX = 2**32 - 1  # the RHT signs read a seed's low 32 bits (a larger one overflowed torch's generator seed)
DEFAULT_SIZE = (512, 256)
DEFAULT_SEEDS = 5  # (scaling.diagnostics.DEFAULT_SEEDS, which tests/test_diagnostics.py holds this to: --help
MAX_SEEDS = 1000   # reads it without importing torch)

def _names(text: str) -> list[str]:
    """'a, b,a' -> ['a', 'b']: each name once, in order; an empty list is a mistake, not 'all'."""
    names = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if not names:
        raise argparse.ArgumentTypeError(f"no names in {text!r}; give a comma-separated list, or leave the flag out")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--formats", type=_names, default=None,
                        help="comma-separated: nvfp4,mxfp4,ufp4,int4,nvfp4_4over6,nvfp4_cap4 (default: all six), a "
                             "format file (.toml: QuantSpec fields as a recipe's operand table writes them, optional "
                             "name and base; docs/numerics.md), or RECIPE:OPERAND for the spec a recipe gives one "
                             "operand (e.g. mxfp4:wgrad.dy); a format takes no transform: --transforms adds each")
    parser.add_argument("--transforms", type=_names, default=None,
                        help="comma-separated: none,h16,h32,rht16,rht32,rht128 (default: none,h16,rht16,rht128)")
    parser.add_argument("--tensor", action="append", default=[], metavar="PATH",
                        help="a .pt or .npy tensor to diagnose, viewed as (-1, last dim) with blocks along the "
                             "last dim (repeatable; replaces the synthetic tensors)")
    parser.add_argument("--size", type=int, nargs=2, default=None, metavar=("R", "K"),
                        help="shape of the synthetic tensors, blocks along K (default 512 256; not with --tensor)")
    parser.add_argument("--seed", type=integer(0, SEED_MAX), default=None,  # (None where not given: `_check_seed_read`)
                        help=f"seed of the synthetic tensors, the single-GEMM operands and the RHT signs (and of a "
                             f"format's stochastic rounding), 0 to {SEED_MAX} (default 0)")
    parser.add_argument("--seeds", type=integer(2, MAX_SEEDS), default=None, metavar="N",
                        help="how many seeds (--seed, --seed + 1, ...) the paper's claims are measured under: each "
                             "claim's mean and 95%% interval over them, and yes or no only where the interval is "
                             f"clear of the claim's bound, else 'within noise' (default {DEFAULT_SEEDS}; the tables "
                             "are --seed's)")
    parser.add_argument("--no-gemm", action="store_true", help="skip the single-GEMM (fprop/dgrad/wgrad) SQNRs")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from scaling import diagnostics as dg
    from scaling.console import print_json

    from scaling.errors import UserError

    tensors = None
    if args.tensor and args.size is not None:
        raise UserError("--size shapes the synthetic tensors, and --tensor replaces them; give one of the two")
    size = tuple(args.size or DEFAULT_SIZE)
    formats = dg.resolve_formats(args.formats or dg.FORMATS)  # (a format file's mistakes before any tensor is read)
    transforms = args.transforms or list(dg.DEFAULT_TRANSFORMS)
    _check_seed_read(args, formats, transforms)
    if args.tensor:
        tensors = {}
        for p in args.tensor:
            name = Path(p).stem
            while name in tensors:
                name += "'"
            tensors[name] = dg.load_tensor(p)
    if min(size) < 1 or size[0] * size[1] > MAX_ELEMENTS:
        raise UserError(f"--size must be two positive integers with at most {MAX_ELEMENTS:,} elements in all "
                        f"(got {size[0]} {size[1]}); the default is 512 256")
    out = dg.run_diagnostics(formats=formats.values(), transforms=transforms, tensors=tensors, size=size,
                             seed=args.seed or 0, seeds=args.seeds or DEFAULT_SEEDS, gemm=not args.no_gemm,
                             progress=lambda msg: print(f"diagnose: {msg}", file=sys.stderr, flush=True))
    if args.json:
        print_json(out)
    else:
        print_tables(out)
    return 0


def _check_seed_read(args: argparse.Namespace, formats: dict, transforms: list[str]) -> None:
    """Refuse a --seed (or --seeds) that nothing here reads: with --tensor (no synthetic tensors), --no-gemm (no GEMM
    operands) and specs that draw nothing (no random signs or rounding), `--seed 3` printed seed 0's
    numbers, as if they held across seeds. (An unknown transform is left to run_diagnostics' message.)"""
    from scaling import diagnostics as dg
    from scaling.errors import UserError

    given = [flag for flag, value in (("--seed", args.seed), ("--seeds", args.seeds)) if value is not None]
    if not given or not args.tensor or not args.no_gemm:
        return
    if not set(transforms) <= set(dg.TRANSFORMS):
        return
    if not any(dg.with_transform(f.spec, t).needs_seed for f in formats.values() for t in transforms):
        raise UserError(f"{' and '.join(given)} {'draws' if len(given) == 1 else 'draw'} the synthetic tensors, the "
                        "single-GEMM operands and the RHT signs, and none is used here (--tensor, --no-gemm, "
                        f"--transforms {','.join(transforms)}): every seed gives the same numbers; leave "
                        f"{' and '.join(given)} out, or add an rht transform (rht16, rht32, rht128)")


def _rounding(out: dict) -> str:
    """How the elements were rounded: RTNE (the named formats'), or as each format's spec says."""
    sr = [f for f, info in out["formats"].items() if info["spec"]["rounding"] == "sr"]
    return f"RTNE; SR: {', '.join(sr)}" if sr else "RTNE"


def print_tables(out: dict) -> None:
    from scaling.console import number, print_table
    from scaling.diagnostics import run_seeds

    print_table(
        [{"tensor": r["tensor"], "format": r["format"], "transform": r["transform"], "SQNR dB": r["sqnr_db"],
          "ΔSQNR dB": r["delta_sqnr_db"], "mean |q|-|v|": r["mean_error"], "levels ≥1%": r["levels_used"],
          "entropy bits": r["level_entropy_bits"]} for r in out["quant"]],
        title=f"quantization error ({_rounding(out)}; mean error in grid units of the block-scaled domain; "
              "ΔSQNR vs no transform)")

    levels_rows = []
    for fmt, info in out["formats"].items():
        n = len(info["levels"])
        levels_rows.append({"format": fmt, "row": "level", **{f"L{i}": info["levels"][i] for i in range(n)}})
        levels_rows.append({"format": fmt, "row": "theory (l-r)/2",
                            **{f"L{i}": info["level_error_theory"][i] for i in range(n)}})
        for r in out["quant"]:
            if r["format"] == fmt and r["transform"] == "none":
                levels_rows.append({"format": fmt, "row": r["tensor"],
                                    **{f"L{i}": r["level_error"][i] for i in range(n)}})
    if any(r["transform"] == "none" for r in out["quant"]):
        print_table(levels_rows, ["format", "row"] + [f"L{i}" for i in range(8)],
                    title="mean error |q|-|v| per grid level (no transform; grid units)")

    if out["gemm"]:
        print_table(
            [{"format": r["format"], "transform": r["transform"],
              **{f"{g} dB": r[f"{g}_sqnr_db"] for g in ("fprop", "dgrad", "wgrad")},
              **{f"Δ{g} dB": r[f"{g}_delta_db"] for g in ("fprop", "dgrad", "wgrad")}} for r in out["gemm"]],
            title="single-GEMM output SQNR vs exact fp64 product, Δ vs no transform (X, W Gaussian; dY with "
                  "outlier channels)")

    if out["claims"]:
        seeds = run_seeds(out["config"]["seed"], out["config"]["seeds"])
        print_table(
            [{"claim": c["claim"], "format": c["format"], "tensor": c["tensor"],
              "mean ± 95% interval": ", ".join(f"{k}: {_mean_interval(m, c['ci95'][k])}" for k, m in c["mean"].items()),
              "theory": (", ".join(f"{k}: {number(v)}" for k, v in c["theory"].items())
                         if isinstance(c.get("theory"), dict) else c.get("theory")),
              "holds": c["verdict"]} for c in out["claims"]],
            title=f"UFP4 paper claims on these tensors, over seeds {seeds[0]}..{seeds[-1]} (yes or no where the "
                  "interval is clear of the claim's bound)")


def _mean_interval(mean: float, interval: list[float]) -> str:
    """'-0.1130 ± 0.0021': a claim's mean over seeds and its interval's half-width ('nan' where not measured)."""
    from scaling.console import number

    if not math.isfinite(mean):
        return number(mean)
    return f"{number(mean)} ± {number((interval[1] - interval[0]) / 2, 2)}"
