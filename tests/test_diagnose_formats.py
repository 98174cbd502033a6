"""`scaling diagnose --formats` with a user's own format: a format file (QuantSpec fields, as a recipe's operand
table writes them) or RECIPE:OPERAND, measured beside the named formats; and each mistake in one refused in
one line naming the file and the field (exit 2)."""

from __future__ import annotations

import json

import pytest

from scaling import diagnostics as dg
from refusal import refused
from scaling.cli import main
from scaling.errors import UserError

SMALL = ["--size", "16", "128", "--transforms", "none,h16"]


def _diagnose(args: list[str], capsys) -> dict:
    assert main(["diagnose", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _rows(out: dict, fmt: str) -> dict[str, list[dict]]:
    """A format's quant and gemm rows, its name left out (to compare two formats' numbers)."""
    return {key: [{k: v for k, v in r.items() if k != "format"} for r in out[key] if r["format"] == fmt]
            for key in ("quant", "gemm")}


def _write(path, text: str) -> str:
    path.write_text(text)
    return path.name


def test_a_user_format_equal_to_a_named_one_gives_its_numbers_to_the_bit(tmp_path, monkeypatch, capsys):
    """nvfp4 written out field by field (no base), mxfp4 likewise, and mxfp4 as a recipe's operand: the same rows,
    quantization and single-GEMM, as the named formats."""
    monkeypatch.chdir(tmp_path)
    nv = _write(tmp_path / "my_nv.toml", 'elem = "e2m1"\nblock = [1, 16]\nscale = "e4m3"\ntensor_scale = true\n')
    mx = _write(tmp_path / "my_mx.toml", 'name = "mx_again"\nelem = "e2m1"\nblock = [1, 32]\nscale = "e8m0"\n'
                                         "tensor_scale = false\n")
    out = _diagnose(["--formats", f"nvfp4,mxfp4,{nv},{mx},mxfp4:fprop.x", *SMALL], capsys)
    assert out["config"]["formats"] == ["nvfp4", "mxfp4", "my_nv", "mx_again", "mxfp4:fprop.x"]
    assert _rows(out, "my_nv") == _rows(out, "nvfp4") and _rows(out, "nvfp4")["gemm"]
    assert _rows(out, "mx_again") == _rows(out, "mxfp4") == _rows(out, "mxfp4:fprop.x")
    assert out["formats"]["my_nv"]["spec"] == out["formats"]["nvfp4"]["spec"]
    assert [out["formats"][f]["source"] for f in out["formats"]] == ["built-in", "built-in", nv, mx, "mxfp4:fprop.x"]


def test_a_different_user_format_runs_and_its_rows_differ(tmp_path, monkeypatch, capsys):
    """E2M1 in 1x8 blocks with an E8M0 scale (mxfp4 as its base): measured, its spec in the JSON, its numbers
    not mxfp4's."""
    monkeypatch.chdir(tmp_path)
    fmt = _write(tmp_path / "e2m1_1x8.toml", 'base = "mxfp4"\nblock = [1, 8]\n')
    out = _diagnose(["--formats", f"mxfp4,{fmt}", *SMALL], capsys)
    info = out["formats"]["e2m1_1x8"]
    assert info["spec"]["block"] == [1, 8] and info["spec"]["scale"] == "e8m0" and info["spec"]["transform"] == 0
    assert info["describe"] == "MX e2m1 1x8 e8m0" and info["levels"] == out["formats"]["mxfp4"]["levels"]
    mine, mx = _rows(out, "e2m1_1x8"), _rows(out, "mxfp4")
    assert len(mine["quant"]) == len(mx["quant"]) == 8 and len(mine["gemm"]) == len(mx["gemm"]) == 2
    for a, b in zip(mine["quant"] + mine["gemm"], mx["quant"] + mx["gemm"]):
        assert a != b


def test_the_fix_a_refusal_names_is_one_that_runs(tmp_path, monkeypatch, capsys):
    """A recipe's operand under a transform is refused with a format file to write instead: that file runs, under
    the transform the message names."""
    monkeypatch.chdir(tmp_path)
    err = _refused(["--formats", "ufp4:fprop.x"], capsys, "a format takes no transform")
    assert 'base = "ufp4:fprop.x", transform = 0, signs = "ones" and pass --transforms none,rht16' in err
    fmt = _write(tmp_path / "uf.toml", 'base = "ufp4:fprop.x"\ntransform = 0\nsigns = "ones"\n')
    out = _diagnose(["--formats", f"ufp4,{fmt}", "--size", "16", "128", "--transforms", "none,rht16"], capsys)
    assert _rows(out, "uf") == _rows(out, "ufp4")  # ufp4's forward operands are ufp4's format under RHT16


def test_a_stochastically_rounding_format_reads_the_seed_and_says_so(tmp_path, monkeypatch, capsys):
    """An SR format draws from --seed (a seed with --tensor and --no-gemm is taken), and the table's title names
    it beside RTNE."""
    import torch

    monkeypatch.chdir(tmp_path)
    torch.save(torch.randn(4, 128, generator=torch.Generator().manual_seed(0)), tmp_path / "t.pt")
    fmt = _write(tmp_path / "sr.toml", 'base = "ufp4"\nrounding = "sr"\n')
    args = ["diagnose", "--tensor", "t.pt", "--formats", f"ufp4,{fmt}", "--transforms", "none", "--no-gemm"]
    sqnr = []
    for seed in ("1", "2"):
        assert main([*args, "--seed", seed, "--json"]) == 0
        sqnr.append(json.loads(capsys.readouterr().out)["quant"][1]["sqnr_db"])
    assert sqnr[0] != sqnr[1]
    assert main(args) == 0
    assert "quantization error (RTNE; SR: sr;" in capsys.readouterr().out


def _refused(args: list[str], capsys, *words: str, gemm: bool = False) -> str:
    """`scaling diagnose ARGS` (without its GEMM checks unless `gemm`) refused, naming `words`."""
    return refused(["diagnose", *([] if gemm else ["--no-gemm"]), *args], capsys, *words)


@pytest.mark.parametrize("files, args, words", [
    ({}, ["--formats", "nvfp4,mine.toml"], ["format file mine.toml does not exist"]),
    ({"f.toml": 'base = "mxfp4"\nblok = [1, 8]\n'}, ["--formats", "f.toml"],
     ["f.toml: unknown field 'blok' (did you mean block?)", "a format file holds name, base and QuantSpec fields"]),
    ({"f.toml": 'base = "mxfp4"\nblock = [1, "8"]\n'}, ["--formats", "f.toml"],
     ["f.toml: block must be [rows, cols] of positive integers"]),
    ({"f.toml": 'block = [1, 8]\nscale = "e8m0"\n'}, ["--formats", "f.toml"],  # QuantSpec's own message
     ["f.toml: an E8M0 (MX) block scale takes no tensor scale: set tensor_scale = false"]),
    ({"f.toml": 'rounding = "rtn"\n'}, ["--formats", "f.toml"], ["f.toml: rounding must be 'rtne' or 'sr'"]),
    ({"f.toml": "this is not toml\n"}, ["--formats", "f.toml"], ["f.toml: not valid TOML"]),
    ({"f.toml": 'base = "nvfp5"\n'}, ["--formats", "f.toml"],
     ["f.toml: base 'nvfp5' is no format (did you mean nvfp4?)"]),
    ({"f.toml": "name = 4\n"}, ["--formats", "f.toml"], ["f.toml: name must be a string"]),
    ({"f.toml": 'name = ""\n'}, ["--formats", "f.toml"], ["f.toml: name is empty"]),
    # a block that does not divide --size's K, named by file and field, with a K that fits
    ({"f.toml": 'base = "mxfp4"\nblock = [1, 24]\n'}, ["--formats", "nvfp4,f.toml", "--size", "16", "128",
                                                      "--transforms", "none"],
     ["--size 16 128: K = 128 must be a multiple of 48", "format f's block = [1, 24] (f.toml)", "--size 16 96"]),
    ({"f.toml": 'block = [16, 16]\n'}, ["--formats", "f.toml", "--size", "20", "128"],
     ["--size 20 128: R = 20 rows must be a multiple of 16 for 2-D tiles", "format f's block = [16, 16] (f.toml)"]),
    ({"nvfp4.toml": ""}, ["--formats", "nvfp4.toml"], ["nvfp4.toml: name 'nvfp4' is the named format's",
                                                        'name = "nvfp4_mine"']),
    ({"f.toml": 'name = "UFP4"\n'}, ["--formats", "f.toml"], ["f.toml: name 'UFP4' is named format ufp4's in other "
                                                              "letter case"]),
    ({"a.toml": 'name = "x"\n', "b.toml": 'name = "x"\nbase = "mxfp4"\n'}, ["--formats", "a.toml,b.toml"],
     ["two formats are named 'x' (a.toml and b.toml)"]),
    ({"f.toml": 'base = "nvfp4"\ntransform = 16\nsigns = "run"\n'}, ["--formats", "f.toml"],
     ["f.toml: transform = 16 (RHT16): a format takes no transform", 'set transform = 0, signs = "ones" in it',
      "--transforms none,rht16"]),
    ({"f.toml": 'elem = "e4m3"\nblock = "tensor"\nscale = "fp32"\n'}, ["--formats", "f.toml"],
     ['f.toml: elem = "e4m3" has no 4-bit grid']),
    ({"r.toml": 'name = "r"\nbase = "ufp4"\n[wgrad]\ndy = "bf16"\n'}, ["--formats", "r.toml"],
     ["r.toml is a recipe file (it has wgrad), not a format file", "r.toml:fprop.x"]),
    ({}, ["--formats", "mxfp4_h16"], ["'mxfp4_h16' is a recipe, not a format", "mxfp4_h16:fprop.x"]),
    ({}, ["--formats", "ufp4:wgrad.dz"], ["ufp4:wgrad.dz: not RECIPE:OPERAND", "(did you mean wgrad.dy?)"]),
    ({}, ["--formats", "nope:fprop.x"], ["nope:fprop.x: unknown recipe 'nope'"]),
    ({"r.toml": 'name = "r"\nbase = "mxfp4"\n[wgrad]\ndy = "bf16"\n'}, ["--formats", "r.toml:wgrad.dy"],
     ["r.toml:wgrad.dy: recipe r keeps wgrad.dy in BF16"]),
    ({}, ["--formats", "fp8:fprop.x"], ['fp8:fprop.x: elem = "e4m3" has no 4-bit grid']),
    ({}, ["--formats", "quartet2:dgrad.dy"], ["quartet2:dgrad.dy: MS-EDEN (eden = true)",
                                              'base = "quartet2:dgrad.dy", eden = false, transform = 0']),
])
def test_a_bad_user_format_is_refused_naming_the_file_and_field(tmp_path, monkeypatch, capsys, files, args, words):
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    _refused(args, capsys, *words)


def test_a_block_that_fits_the_tensors_but_not_the_gemm_operands_is_refused(tmp_path, monkeypatch, capsys):
    """The single-GEMM operands' K (256, 512, 1024) is no --size's: a block of 24 divides 240, not 256."""
    monkeypatch.chdir(tmp_path)
    fmt = _write(tmp_path / "f.toml", 'base = "mxfp4"\nblock = [1, 24]\n')
    _refused(["--formats", fmt, "--size", "16", "240", "--transforms", "none"], capsys,
             "the single-GEMM operand x of fprop (1024 x K = 256)", "format f's block = [1, 24] (f.toml)",
             "pass --no-gemm", gemm=True)


def test_python_callers_pass_a_format_of_their_own():
    """run_diagnostics takes a Format (name, QuantSpec, source) as the CLI's resolved entries, checked alike."""
    from scaling.quant import QuantSpec

    mine = dg.Format("mine", QuantSpec(elem="int4", block=(1, 8)), "python")
    out = dg.run_diagnostics(formats=("int4", mine), transforms=("none",), size=(16, 64), gemm=False)
    assert out["formats"]["mine"]["source"] == "python" and out["formats"]["mine"]["spec"]["block"] == [1, 8]
    assert [r["format"] for r in out["quant"]] == ["int4", "mine"] * 4
    with pytest.raises(UserError, match="the named format's"):
        dg.run_diagnostics(formats=(dg.Format("int4", QuantSpec(elem="int4", block=(1, 8)), "python"),),
                           transforms=("none",), size=(16, 64), gemm=False)


def test_the_documented_format_files_and_operands_run_as_documented(tmp_path, monkeypatch, capsys):
    """docs/numerics.md's example format files, its RECIPE:OPERAND examples and README's, measured (a change to the
    format file's fields or to the presets shows here)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    section = (root / "docs" / "numerics.md").read_text().split("### Your own format")[1].split("## JSON shape")[0]
    monkeypatch.chdir(tmp_path)
    files = []
    for text in re.findall(r"```toml\n(.*?)```", section, re.S):
        text = "\n".join(line.strip() for line in text.splitlines())  # (indented in the list)
        files.append(re.match(r"# (\S+\.toml)", text).group(1))
        (tmp_path / files[-1]).write_text(text)
    # preset operands (a recipe file's, `my_recipe.toml:dgrad.dy`, has no file here)
    text = section + (root / "README.md").read_text()
    operands = set(re.findall(r"(?<![\w.])(\w+:(?:fprop|dgrad|wgrad)\.\w+)", text))
    assert len(files) == 2 and {"mxfp4:wgrad.dy", "nvfp4:fprop.w", "ufp4_no_rht:wgrad.dy"} <= set(operands)
    operands = sorted(operands - {"ufp4:fprop.x"})  # (the documented refusal: RHT16)
    out = _diagnose(["--formats", ",".join(["nvfp4", *files, *operands]), "--size", "16", "128", "--transforms",
                     "none", "--no-gemm"], capsys)
    assert out["formats"]["e2m1_1x8_e8m0"]["describe"] == "MX e2m1 1x8 e8m0"
    assert out["formats"]["ufp4_1x32"]["describe"] == "uniform e1m2 1x32 e4m3+fp32"
