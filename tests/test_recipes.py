"""Recipe presets match RECIPES.md's table; TOML recipes; errors name the field."""

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from refusal import refused
from scaling.errors import UserError
from scaling.recipes import OPERANDS, Recipe, get_recipe, list_recipes
from sweeps.store import recipe_label

RECIPES_MD = ["bf16", "fp8", "mxfp8", "nvfp4", "nvfp4_4over6", "nvfp4_rht_all", "nvfp4_cap4", "mxfp4",
              "mxfp4_fprop", "mxfp4_fprop_dgrad", "mxfp4_sr", "mxfp4_rht", "mxfp4_h16", "mxfp4_h32", "ufp4",
              "ufp4_rht_wgrad", "ufp4_no_rht", "quartet2"]


def test_every_preset_by_name():
    assert list_recipes() == RECIPES_MD


def test_nvfp4_matches_the_paper():
    r = get_recipe("nvfp4")
    assert r.fprop_x.block == (1, 16) and r.fprop_w.block == (16, 16) and r.dgrad_w == r.fprop_w
    assert r.fprop_x.scale == "e4m3" and r.fprop_x.tensor_scale and r.fprop_x.rounding == "rtne"
    assert r.dgrad_dy.rounding == "sr" and not r.dgrad_dy.transform
    assert (r.wgrad_dy.transform, r.wgrad_dy.signs, r.wgrad_dy.rounding) == (16, "run", "sr")
    assert (r.wgrad_x.transform, r.wgrad_x.signs, r.wgrad_x.rounding) == (16, "run", "rtne")


def test_mx_ladder_and_hadamard_variants():
    for name in ("mxfp4", "mxfp4_h16", "mxfp4_h32", "mxfp4_rht"):
        for o in OPERANDS:
            s = get_recipe(name).spec(o)
            assert (s.elem, s.block, s.scale, s.tensor_scale) == ("e2m1", (1, 32), "e8m0", False)
    assert get_recipe("mxfp4_h16").fprop_x.signs == "ones" and get_recipe("mxfp4_h16").fprop_x.transform == 16
    assert get_recipe("mxfp4_rht").wgrad_x.signs == "step"
    assert get_recipe("mxfp4_fprop").dgrad_dy.elem == "e4m3" and get_recipe("mxfp4_fprop_dgrad").dgrad_dy.elem == "e2m1"
    assert get_recipe("mxfp4_fprop_dgrad").wgrad_x.elem == "e4m3"
    sr = get_recipe("mxfp4_sr")
    assert sr.dgrad_dy.rounding == sr.wgrad_dy.rounding == "sr" and sr.fprop_x.rounding == "rtne"


def test_ufp4_and_quartet2():
    u = get_recipe("ufp4")
    assert all(u.spec(o).elem == "e1m2" and u.spec(o).transform == 16 for o in OPERANDS)
    assert [u.spec(o).rounding for o in OPERANDS] == ["rtne", "rtne", "sr", "rtne", "sr", "rtne"]
    assert not get_recipe("ufp4_rht_wgrad").fprop_x.transform and get_recipe("ufp4_rht_wgrad").wgrad_x.transform
    q = get_recipe("quartet2")
    assert q.fprop_x.four_over_six and q.fprop_x.scale_bound == 256 and not q.fprop_x.transform
    assert q.backward_from_forward
    for o in OPERANDS[2:]:
        s = q.spec(o)
        assert s.eden and s.transform == 128 and s.signs == "layer_step" and s.rounding == "rtne"


def test_the_other_table_rows_match_recipes_md():
    """RECIPES.md rows not pinned above: fp8 (E4M3 forward, E5M2 dY, per-tensor current scaling),
    mxfp8 (MX E4M3 1x32 everywhere), nvfp4_4over6 (4/6 with E4M3 bound 256 on fprop X and W, dgrad's W
    the same values, dY as nvfp4), nvfp4_rht_all (RHT16 with run signs on all six operands, W then 1x16), nvfp4_cap4 (E2M1
    capped at 4 on every operand), ufp4_no_rht (no transform, SR only on dY)."""
    fp8 = get_recipe("fp8")
    assert [fp8.spec(o).elem for o in OPERANDS] == ["e4m3", "e4m3", "e5m2", "e4m3", "e5m2", "e4m3"]
    assert all(fp8.spec(o).block is None and fp8.spec(o).rounding == "rtne" for o in OPERANDS)
    for o in OPERANDS:
        s = get_recipe("mxfp8").spec(o)
        assert (s.elem, s.block, s.scale, s.tensor_scale, s.transform) == ("e4m3", (1, 32), "e8m0", False, 0)
    nv, six = get_recipe("nvfp4"), get_recipe("nvfp4_4over6")
    assert six.fprop_x == nv.fprop_x.but(four_over_six=True, scale_bound=256.0)
    assert six.fprop_w == nv.fprop_w.but(four_over_six=True, scale_bound=256.0)
    assert (six.dgrad_dy, six.wgrad_dy, six.wgrad_x) == (nv.dgrad_dy, nv.wgrad_dy, nv.wgrad_x)
    assert six.dgrad_w == six.fprop_w  # "as nvfp4": W the same 16x16 values (tests/test_linear.py reads them)
    rht = get_recipe("nvfp4_rht_all")
    for o in OPERANDS:
        s = rht.spec(o)
        assert (s.transform, s.signs, s.block) == (16, "run", (1, 16))
        assert s.rounding == ("sr" if o.endswith("_dy") else "rtne")
    cap = get_recipe("nvfp4_cap4")
    assert all(cap.spec(o) == nv.spec(o).but(cap=4.0) and cap.spec(o).elem_max == 4.0 for o in OPERANDS)
    plain = get_recipe("ufp4_no_rht")
    assert all(plain.spec(o) == get_recipe("ufp4").spec(o).but(transform=0, signs="ones") for o in OPERANDS)


def test_recipe_from_toml(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text('name = "mine"\nbase = "nvfp4"\nhigh_precision_blocks = [0, -1]\n'
                 '[fprop.x]\nelem = "e1m2"\nblock = [1, 16]\n[wgrad]\ndy = "bf16"\nx = "bf16"\n')
    r = Recipe.from_toml(p)
    assert r.name == "mine" and r.fprop_x.elem == "e1m2" and r.wgrad_dy is None and r.wgrad_x is None
    assert r.dgrad_dy == get_recipe("nvfp4").dgrad_dy and r.high_precision_blocks == (0, -1)
    assert get_recipe(str(p)) == r


def _chain(tmp_path):
    """b.toml built on sub/a.toml (relative to b), built on the preset nvfp4; c.toml on b by its absolute path."""
    (tmp_path / "sub").mkdir()
    a = tmp_path / "sub" / "a.toml"
    a.write_text('# nvfp4, the weight gradient in BF16\nname = "a"\nbase = "nvfp4"\n[wgrad]\ndy = "bf16"\nx = "bf16"\n')
    b = tmp_path / "b.toml"
    b.write_text('name = "b"\nbase = "sub/a.toml"\nhigh_precision_blocks = [0, -1]\n[fprop.x]\nelem = "e1m2"\n'
                 '[wgrad.x]\nelem = "e4m3"\nblock = "tensor"\nscale = "fp32"\n')
    c = tmp_path / "c.toml"
    c.write_text(f'name = "c"\nbase = "{b}"\nsource = "c\u00e9 \\"quoted\\" \\u007f"\n[dgrad.dy]\nfour_over_six = true\n')
    return a, b, c


def test_a_recipe_file_built_on_another_recipe_file(tmp_path):
    """`base` named a preset only; it names a recipe file too (relative to the file naming it, or absolute), so
    recipe B is built on recipe A as A is on its preset: an operand table changes the base's fields it names."""
    from scaling.recipes import recipe_content, recipe_chain

    a, b, c = _chain(tmp_path)
    nv = get_recipe("nvfp4")
    want_b = replace(nv, name="b", source=f"user recipe ({b} on a.toml on nvfp4)", high_precision_blocks=(0, -1),
                     fprop_x=nv.fprop_x.but(elem="e1m2"), wgrad_dy=None,
                     wgrad_x=nv.fprop_x.but(elem="e4m3", block=None, scale="fp32"))
    assert Recipe.from_toml(b) == get_recipe(str(b)) == want_b
    want_c = replace(want_b, name="c", source='c\u00e9 "quoted" \x7f', dgrad_dy=nv.dgrad_dy.but(four_over_six=True,
                                                                                         scale_bound=256.0))
    assert Recipe.from_toml(c) == want_c and [p for p, _ in recipe_chain(c)] == [c, b, tmp_path / "sub" / "a.toml"]
    # What a run keeps (its recipe.toml) and hashes: one file, which gives the same recipe without the bases
    copy = tmp_path / "elsewhere" / "recipe.toml"
    copy.parent.mkdir()
    for top, want in ((b, want_b), (c, want_c)):
        copy.write_bytes(recipe_content(top))
        assert Recipe.from_toml(copy) == replace(want, source=want.source if top == c else f"user recipe ({copy})")
        assert recipe_content(copy) == copy.read_bytes()  # (a run's copy hashes as the chain it came from)
    # a lone file's content is its bytes, as before (its runs keep their ids), also one built on a preset
    assert recipe_content(a) == a.read_bytes()


def test_the_recipes_table_says_what_a_recipe_file_is_built_on(tmp_path, capsys):
    """`scaling recipes` showed a recipe built on other files as `user recipe (b.toml)`, as if it stood alone: its
    source says the chain, short (the bases' file names, then the preset); a file's own `source` stays its own."""
    from scaling.cli import main

    a, b, c = _chain(tmp_path)
    lone = tmp_path / "lone.toml"
    lone.write_text('name = "lone"\n[fprop.x]\nelem = "e2m1"\n')
    assert main(["recipes", str(b), str(a), str(lone), str(c)]) == 0
    lines = capsys.readouterr().out.splitlines()
    column = [cell.strip() for cell in next(line for line in lines if line.startswith("┃")).split("┃")].index("source")
    rows = {cells[1].strip(): cells[column].strip() for cells in (line.split("│") for line in lines if line.startswith("│"))}
    assert rows == {"b": f"user recipe ({b} on a.toml on nvfp4)", "a": f"user recipe ({a} on nvfp4)",
                    "lone": f"user recipe ({lone})", "c": 'c\u00e9 "quoted" \x7f'}


@pytest.mark.parametrize("case", ["cycle", "self", "missing", "typo", "preset.toml", "folder", "same name"])
def test_a_base_chain_that_cannot_be_built_is_one_line_naming_it(tmp_path, capsys, case):
    """A cycle of bases (A -> B -> A) or a base file that is missing: one line that names the chain, exit 2."""
    from scaling.cli import main

    (tmp_path / "r").mkdir()
    (tmp_path / "r.toml").mkdir()
    top = tmp_path / "top.toml"
    bases = {"cycle": "r/mid.toml", "self": "top.toml", "missing": "r/gone.toml", "typo": "r/mdi.toml",
             "preset.toml": "nvfp4.toml",
             "folder": "r.toml", "same name": "r/mid.toml"}
    top.write_text(f'name = "top"\nbase = "{bases[case]}"\n')
    mid = {"cycle": 'name = "mid"\nbase = "../top.toml"\n', "same name": 'name = "top"\nbase = "bf16"\n'}
    (tmp_path / "r" / "mid.toml").write_text(mid.get(case, 'name = "mid"\n'))
    assert main(["recipes", str(top)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    said = {
        "cycle": f"recipe file {top}: its bases go round in a cycle ({top} -> {tmp_path}/r/mid.toml -> "
                 f"{tmp_path}/r/../top.toml); a recipe cannot be built on itself: give {tmp_path}/r/mid.toml a base "
                 "that is not in this chain",
        "self": f"recipe file {top}: its bases go round in a cycle ({top} -> {top});",
        "missing": f"recipe file {top}: the base 'r/gone.toml' of {top} does not exist "
                   f"({top} -> {tmp_path}/r/gone.toml); "
                   "a base file's path is relative to the file that names it, or absolute",
        # a near miss of a file in the base's folder is named, as the file would write it (a user's walk)
        "typo": f"the base 'r/mdi.toml' of {top} does not exist ({top} -> {tmp_path}/r/mdi.toml) "
                '(did you mean base = "r/mid.toml"?); a base file\'s path is relative',
        "preset.toml": "does not exist (" + f"{top} -> {tmp_path}/nvfp4.toml) (the preset is named without .toml: "
                       'base = "nvfp4")',
        "folder": f"the base 'r.toml' of {top} is a folder ({top} -> {tmp_path}/r.toml)",
        "same name": f"{top}: name 'top' is its base's (r/mid.toml); give the recipe a name of its own",
    }[case]
    assert said in err, err


@pytest.mark.parametrize("base_text, said", [
    ('name = "t1"\nbase = "nvfp4"\n[fprop.x]\nelme = "e2m1"\n',
     "fprop.x.elme: unknown field (did you mean elem?)"),
    ('name = x\n', "not valid TOML (Invalid value"),
    (b'name = "t1"\n\xff\n', "not UTF-8 text (byte 0xff at offset 12); save the recipe file as UTF-8"),
    ('name = "t1"\n[fprop.x]\ntransform = 16\n', "fprop: both operands must get the same transform"),
])
def test_an_error_in_a_base_file_names_the_file_given_and_the_chain_to_it(tmp_path, capsys, base_text, said):
    """An error in a base of a base named the base file alone ('bad/t1.toml: fprop.x.elme ...'), which the user,
    who gave c1.toml, never named: the file given, the bad file and the chain between, in one line, exit 2."""
    from scaling.cli import main

    (tmp_path / "bad").mkdir()
    c1, t2, t1 = (tmp_path / "bad" / f"{n}.toml" for n in ("c1", "t2", "t1"))
    c1.write_text('name = "c1"\nbase = "t2.toml"\n')
    t2.write_text('name = "t2"\nbase = "t1.toml"\n')
    t1.write_bytes(base_text if isinstance(base_text, bytes) else base_text.encode())
    assert main(["recipes", str(c1)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: recipe file {c1}, in its base {t1} ({c1} -> {t2} -> {t1}): {said}"), err
    # the file given alone keeps its plain message
    assert main(["recipes", str(t1)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {t1}: {said}")


@pytest.mark.parametrize("body, words", [
    ('name = "x"\n[fprop.x]\nrounding = "nearest"\n', ["fprop.x", "rounding"]),
    ('name = "x"\n[fprop.x]\nelemm = "e2m1"\n', ["fprop.x.elemm", "unknown field"]),
    ('name = "x"\n[fprop.z]\nelem = "e2m1"\n', ["fprop.z"]),
    ('name = "x"\n[wgrad.x]\ntransform = 16\nsigns = "run"\n', ["wgrad", "same transform"]),
    ('[fprop.x]\nelem = "e2m1"\n', ["`name` (a string) is required"]),
    ('name = 5\n', ["name must be a string (got 5)"]),  # it said "is required", as if there were none
    ('name = "x"\nbase = "nvfp5"\n', ["base 'nvfp5' is not a preset (did you mean nvfp4?)"]),
    ('name = "x"\nbase = "Nvfp4"\n', ["base 'Nvfp4' is not a preset (did you mean nvfp4?)"]),  # as get_recipe says
    ('name = "x"\nbase = 3\n', ["base 3 is not a preset"]),
    ('name = "x"\n[fprop.x]\nblock = [1, 16.0]\n', ["fprop.x", "block must be [rows, cols] of positive integers"]),
    ('name = "x"\n[fprop.x]\nheadroom = "big"\n', ["fprop.x", "headroom must be a positive number"]),
    ('name = "x"\n[fprop.x]\ntensor_scale = "no"\n', ["fprop.x", "tensor_scale must be true or false"]),
    ('name = "x"\nbase = "nvfp4"\n[fprop.x]\nscale_bound = -3\n', ["fprop.x", "scale_bound must be a positive number"]),
    ('name = "x"\nbase = "nvfp4"\n[fprop.x]\nscale_bound = 1e6\n', ["scale_bound must be at most 448"]),
    ('name = "x"\nhigh_precision_blocks = [true]\n', ["high_precision_blocks must be a list of block indices"]),
    ('name = x\n', ["not valid TOML"]),
    ('name = "nvfp4"\nbase = "bf16"\n', ["name 'nvfp4' is a preset's", "nvfp4_mine"]),
    ('name = "NVFP4"\n', ["name 'NVFP4' is preset nvfp4's in other letter case", "nvfp4_mine"]),
    ('name = " mine"\n', ["name ' mine' has spaces around it"]),
    ('name = "a\\tb"\n', ["unprintable"]),
    ('name = "x"\nsource = 12\n', ["source must be a string"]),
])
def test_bad_toml_names_the_field(tmp_path, body, words):
    p = tmp_path / "bad.toml"
    p.write_text(body)
    with pytest.raises(UserError) as e:
        Recipe.from_toml(p)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("body, said", [
    ('base = "nvfp4"\nhigh_precision_block = [0]\n', "unknown key(s) high_precision_block (did you mean "
                                                      "high_precision_blocks?); allowed: "),
    ('base = "nvfp4"\n[fprop.x]\nrouding = "sr"\n', "fprop.x.rouding: unknown field (did you mean rounding?); "
                                                      "QuantSpec fields are "),
    ('base = "nvfp4"\n[fprop.y]\nelem = "e2m1"\n', "unknown operand fprop.y; fprop has fprop.x, fprop.w"),
    ('base = "nvfp4"\n[wgrad]\ndy = "BF16"\nx = "bf16"\n', 'wgrad.dy: must be a table of QuantSpec fields or the '
                                                            'string "bf16" (got \'BF16\')'),
])
def test_a_misspelt_key_says_the_one_meant(tmp_path, body, said):
    """A hardware team's typo in a key: the message names the key it nearly is (as a misspelt base or recipe name
    does), and what a mistaken operand value was."""
    p = tmp_path / "bad.toml"
    p.write_text('name = "x"\n' + body)
    with pytest.raises(UserError) as e:
        Recipe.from_toml(p)
    assert str(e.value).startswith(f"{p}: {said}"), str(e.value)


def test_a_transform_on_one_operand_of_a_gemm_names_both_fields(tmp_path):
    """The message said "got fprop.x=(16, 'ones') and fprop.w=(0, 'ones')": which fields those are, and what to set,
    the reader had to guess."""
    p = tmp_path / "bad.toml"
    p.write_text('name = "x"\nbase = "nvfp4"\n[fprop.x]\ntransform = 16\n')
    with pytest.raises(UserError) as e:
        Recipe.from_toml(p)
    assert str(e.value) == (f"{p}: fprop: both operands must get the same transform along K (so the product is "
                            'unchanged), got transform = 16, signs = "ones" for fprop.x and transform = 0, signs = '
                            '"ones" for fprop.w: give [fprop.x] and [fprop.w] the same transform and signs')


def test_a_misspelt_sign_policy_is_one_message(tmp_path):
    # it used to add "random signs need a transform", as if the policy had been understood
    p = tmp_path / "bad.toml"
    p.write_text('name = "x"\n[fprop.x]\nsigns = "random"\n')
    with pytest.raises(UserError) as e:
        Recipe.from_toml(p)
    assert str(e.value) == f"{p}: fprop.x: signs must be one of ones, run, step, layer_step (got 'random')"


def test_taking_a_base_transform_off_names_its_sign_policy(tmp_path):
    # the table keeps the base's signs = "run": the message only said to set a transform, the opposite
    # of what the file asks for
    p = tmp_path / "no_rht.toml"
    p.write_text('name = "no_rht"\nbase = "ufp4_rht_wgrad"\n[wgrad.dy]\ntransform = 0\n[wgrad.x]\ntransform = 0\n')
    with pytest.raises(UserError) as e:
        Recipe.from_toml(p)
    assert str(e.value) == (f'{p}: wgrad.dy: signs = "run" draws random signs for a transform: set transform to '
                            '16, 32 or 128, or signs = "ones" for none')
    p.write_text(p.read_text().replace("transform = 0", 'transform = 0\nsigns = "ones"'))
    assert Recipe.from_toml(p).wgrad_x == get_recipe("ufp4_no_rht").wgrad_x


def test_an_operand_table_changes_the_base_operand_field_by_field(tmp_path):
    p = tmp_path / "q2sr.toml"
    p.write_text('name = "q2sr"\nbase = "quartet2"\n[fprop.x]\nrounding = "sr"\n')
    r = Recipe.from_toml(p)
    assert r.fprop_x == get_recipe("quartet2").fprop_x.but(rounding="sr")  # 4/6 and its bound 256 kept


def test_four_over_six_in_a_file_brings_its_scale_bound_of_256(tmp_path):
    """RECIPES.md: with 4/6 the E4M3 bound is 256. `four_over_six = true` on an nvfp4 operand is the
    preset nvfp4_4over6's operand; a scale_bound the table names is kept."""
    path = tmp_path / "r.toml"
    path.write_text('name = "mine"\nbase = "nvfp4"\n[fprop.x]\nfour_over_six = true\n')
    assert Recipe.from_toml(path).fprop_x == get_recipe("nvfp4_4over6").fprop_x
    path.write_text('name = "mine"\nbase = "nvfp4"\n[fprop.x]\nfour_over_six = true\nscale_bound = 448\n')
    assert Recipe.from_toml(path).fprop_x.scale_bound == 448
    assert get_recipe(path) == Recipe.from_toml(path)  # a Path as well as a str


def test_four_over_six_on_scales_without_its_bound_is_one_message(tmp_path):
    """4/6 asked of an MX operand (E8M0 scales, no tensor scale) is refused for what it is; the 256 bound it brings
    along was refused as well, with "leave scale_bound at 448", a field the file never named."""
    path = tmp_path / "r.toml"
    path.write_text('name = "mine"\nbase = "mxfp4"\n[fprop.x]\nfour_over_six = true\n[fprop.w]\nfour_over_six = true\n')
    with pytest.raises(UserError) as e:
        Recipe.from_toml(path)
    assert str(e.value) == (f'{path}: fprop.x: 4/6 and MS-EDEN need E4M3 block scales: set scale = "e4m3" with '
                            "blocks (e.g. block = [1, 16]), or four_over_six = false"), str(e.value)
    path.write_text(path.read_text().replace("true", 'true\nscale = "e4m3"\nblock = [1, 16]\ntensor_scale = true'))
    assert Recipe.from_toml(path).fprop_x == get_recipe("nvfp4_4over6").fprop_x  # and with them, its bound


def test_a_recipe_file_can_ask_for_per_tensor_scaling(tmp_path):
    # TOML has no None, and leaving block out keeps the base's blocks (or QuantSpec's 1x16): "tensor"
    # is the only way a file reaches FP8-style per-tensor scaling without basing it on fp8
    p = tmp_path / "fp8ish.toml"
    p.write_text('name = "fp8ish"\nbase = "nvfp4"\n[fprop.x]\nelem = "e4m3"\nblock = "tensor"\nscale = "fp32"\n'
                 '[fprop.w]\nelem = "e4m3"\nblock = "tensor"\nscale = "fp32"\n')
    r = Recipe.from_toml(p)
    assert r.fprop_x == r.fprop_w == get_recipe("fp8").fprop_x
    p.write_text('name = "x"\n[fprop.x]\nblock = []\n')
    with pytest.raises(UserError, match='"tensor" in a recipe file'):
        Recipe.from_toml(p)


@pytest.mark.parametrize("base, extra, said", [("mxfp4", "", 'scale = "e8m0"'), ("nvfp4", "", 'scale = "e4m3"'),
                                              ("fp8", "tensor_scale = false\n", "tensor_scale = false")])
def test_per_tensor_scaling_refuses_scale_fields_it_would_ignore(tmp_path, base, extra, said):
    # quantize scales a per-tensor operand by one FP32 amax scale whatever `scale` and `tensor_scale` say:
    # MXFP4 "but per-tensor" was accepted and quantized with an FP32 scale, not a power of two; NVFP4 "but
    # per-tensor" kept its E4M3 `scale`, which no per-tensor operand reads
    p = tmp_path / "pt.toml"
    p.write_text(f'name = "pt"\nbase = "{base}"\n[fprop.x]\nblock = "tensor"\n{extra}'
                 f'[fprop.w]\nblock = "tensor"\n{extra}')
    with pytest.raises(UserError, match=f"fprop.x: per-tensor scaling .* so {said} would be ignored"):
        Recipe.from_toml(p)


def test_a_recipe_file_can_take_a_base_cap_off(tmp_path):
    # TOML has no None either: "none" takes nvfp4_cap4's cap off (the whole E2M1 grid again)
    p = tmp_path / "uncapped.toml"
    p.write_text('name = "uncapped"\nbase = "nvfp4_cap4"\n[fprop.x]\ncap = "none"\n')
    r = Recipe.from_toml(p)
    assert r.fprop_x == get_recipe("nvfp4").fprop_x and r.fprop_w.cap == 4.0
    p.write_text('name = "x"\nbase = "nvfp4_cap4"\n[fprop.x]\ncap = "off"\n')
    with pytest.raises(UserError, match='fprop.x.cap: .off. is not a cap.*"none"'):
        Recipe.from_toml(p)


def test_a_recipe_file_is_read_as_utf8_with_or_without_a_byte_order_mark(tmp_path):
    p = tmp_path / "bom.toml"
    p.write_bytes('\ufeffname = "mine_é"\nbase = "nvfp4"\n'.encode())  # as Windows Notepad saves it
    assert Recipe.from_toml(p).name == "mine_é"
    assert recipe_label(str(p)) == "mine_é"  # what plan, status, collect and reports call its runs
    p.write_bytes(b'name = "mine"\n\xff\n')
    with pytest.raises(UserError) as e:
        Recipe.from_toml(p)
    assert str(e.value) == f"{p}: not UTF-8 text (byte 0xff at offset 14); save the recipe file as UTF-8"


def test_a_recipe_file_that_is_a_folder_is_one_message(tmp_path):
    (tmp_path / "x.toml").mkdir()
    with pytest.raises(UserError, match="cannot read recipe file"):
        Recipe.from_toml(tmp_path / "x.toml")


@pytest.mark.parametrize("make, name, words", [
    # a folder, or a recipe file not ending in .toml, was an "unknown recipe" among the preset names
    (lambda p: (p / "recipes").mkdir(), "recipes", ("recipe recipes is a folder",)),
    (lambda p: (p / "mine.tml").write_text('name = "mine"\n'), "mine.tml", ("must end in .toml", "mine.toml")),
    # a .TOML file, which runs would take for a preset's name (its content not in the run's id): renamed
    (lambda p: (p / "Mine.TOML").write_text('name = "mine"\n'), "Mine.TOML", ("must end in .toml", "Mine.toml")),
    (None, "nvfp4.toml", ("does not exist", "the preset is named without .toml: nvfp4")),
    # a typo of a recipe file beside it is named (a user's walk); a name like none of them gets no guess
    (lambda p: (p / "my_child.toml").write_text('name = "c"\n'), "my_chlid.toml",
     ("recipe file my_chlid.toml does not exist (did you mean my_child.toml?)",)),
    (lambda p: (p / "r").mkdir() or (p / "r" / "my_child.toml").write_text('name = "c"\n'), "r/child.toml",
     ("recipe file r/child.toml does not exist (did you mean r/my_child.toml?)",)),
    (None, "NVFP4", ("unknown recipe 'NVFP4' (did you mean nvfp4?)",)),
    (None, "mxfp4h16", ("unknown recipe 'mxfp4h16' (did you mean mxfp4_h16?)",)),
    (None, "", ("a recipe name is empty",)),
])
def test_a_mistaken_recipe_name_says_what_it_is(tmp_path, monkeypatch, make, name, words):
    monkeypatch.chdir(tmp_path)
    if make:
        make(tmp_path)
    with pytest.raises(UserError) as e:
        get_recipe(name)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_a_missing_recipe_file_like_none_beside_it_gets_no_guess(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_child.toml").write_text('name = "c"\n')
    with pytest.raises(UserError) as e:
        get_recipe("zzz.toml")
    assert str(e.value) == "recipe file zzz.toml does not exist"


def test_high_precision_blocks_must_name_blocks_of_the_model():
    from models import build_model
    from scaling.linear import convert

    model = build_model("nanochat", "0.5M")
    n = len(model.blocks)
    with pytest.raises(UserError, match=f"high_precision_blocks \\[{n}\\] name no block"):
        convert(model, replace(get_recipe("nvfp4"), high_precision_blocks=(0, n)))
    convert(model, replace(get_recipe("nvfp4"), high_precision_blocks=(0, -1)))  # -1: the last


def test_equal_bf16_blocks_give_equal_formats():
    """The formats a shared-efficiency fit groups recipes by (`Recipe.formats`) write the BF16 blocks in one spelling
    for one set of blocks: [-1, 0] and [0, -1] always; [0, 11] and [0, -1] where the models have 12 blocks (they
    differ where depths differ: 11 is then not the last block of each). Written as given, these were 'different
    formats' that shared no efficiency."""
    from scaling.recipes import canonical_blocks

    mx = get_recipe("mxfp4")
    with_blocks = {b: replace(mx, name="mine", high_precision_blocks=b) for b in ((0, -1), (-1, 0), (0, 11), (0, 0, -1))}
    assert with_blocks[(0, -1)].formats() == with_blocks[(-1, 0)].formats() == with_blocks[(0, 0, -1)].formats()
    assert with_blocks[(0, -1)].forward_format == mx.forward_format + " (bf16 blocks 0, -1)"
    assert with_blocks[(0, -1)].formats([12]) == with_blocks[(0, 11)].formats([12])
    assert with_blocks[(0, -1)].formats([12])[0].endswith("(bf16 blocks 0, 11)")
    assert with_blocks[(0, -1)].formats([12, 20]) != with_blocks[(0, 11)].formats([12, 20])
    assert canonical_blocks([0, -1], [5, 10]) == (0, -1) and canonical_blocks([0, 4], [5, 10]) == (0, 4)
    assert canonical_blocks([4, -1, -2], [5, 6]) == canonical_blocks([-1, -2], [5, 6])  # the same blocks at 5 and 6
    assert canonical_blocks([0, 11], [5, 12]) == (0, 11)  # (no block 11 at 5: written for the depth it names)
    assert canonical_blocks([], [12]) == ()


def test_cli_recipes_json_and_unknown_recipe():
    out = subprocess.run([sys.executable, "-m", "scaling.cli", "recipes", "--json"], capture_output=True, text=True)
    assert out.returncode == 0
    data = json.loads(out.stdout)
    assert [d["name"] for d in data] == RECIPES_MD
    assert data[3]["fprop.w"]["block"] == [16, 16]
    bad = subprocess.run([sys.executable, "-m", "scaling.cli", "recipes", "nvfp5"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown recipe 'nvfp5'" in bad.stderr and "quartet2" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_cli_recipes_shows_the_blocks_a_recipe_leaves_in_bf16(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\nbase = "ufp4"\nhigh_precision_blocks = [0, -1]\n')
    env = {**os.environ, "COLUMNS": "400"}
    out = subprocess.run([sys.executable, "-m", "scaling.cli", "recipes", str(path), "nvfp4"], capture_output=True,
                         text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "BF16 blocks" in out.stdout
    mine, nvfp4 = (next(line for line in out.stdout.splitlines() if f" {name} " in line) for name in ("mine", "nvfp4"))
    assert "0, -1" in mine and "none" in nvfp4
    plain = subprocess.run([sys.executable, "-m", "scaling.cli", "recipes", "nvfp4"], capture_output=True, text=True, env=env)
    assert "BF16 blocks" not in plain.stdout  # no column of "none"s for the presets


def test_the_table_tells_apart_specs_that_differ_in_bound_or_headroom():
    """QuantSpec.describe() leaves out scale_bound and headroom: a recipe file changing only those
    read exactly like its base in `scaling recipes` (QA finding). Quartet II's backward operands are
    the forward's quantized W and X, which the table says."""
    nv = get_recipe("nvfp4")
    assert replace(nv, fprop_x=nv.fprop_x.but(scale_bound=256.0)).describe_gemm("fprop") != nv.describe_gemm("fprop")
    assert replace(nv, fprop_w=nv.fprop_w.but(headroom=0.9)).describe_gemm("fprop") != nv.describe_gemm("fprop")
    assert "4/6 bound 256" in get_recipe("nvfp4_4over6").describe_gemm("fprop")
    q2 = get_recipe("quartet2")
    assert "fprop's w" in q2.describe_gemm("dgrad") and "fprop's x" in q2.describe_gemm("wgrad")
    assert "headroom 0.9881" in q2.describe_gemm("dgrad") and "fprop's" not in nv.describe_gemm("dgrad")


def test_cli_recipes_shows_a_name_given_twice_once(capsys):
    from scaling.cli import main

    assert main(["recipes", "nvfp4", "ufp4", "nvfp4", "--json"]) == 0
    assert [d["name"] for d in json.loads(capsys.readouterr().out)] == ["nvfp4", "ufp4"]


@pytest.mark.parametrize("name, across_layers, across_steps", [
    ("nvfp4", False, False),        # "RHT sign vector drawn once per run and shared by all layers"
    ("nvfp4_rht_all", False, False),
    ("ufp4", False, False),         # "RHT seed policy as nvfp4"
    ("mxfp4_rht", False, True),     # "signs redrawn every step"
    ("quartet2", True, True),       # MS-EDEN: "signs redrawn at every backward call (seed from step and layer)"
])
def test_rht_sign_vectors_follow_each_recipes_policy(name, across_layers, across_steps):
    """The sign vectors the layers' random Hadamard transforms use (QLinear.step_seeds -> signs_for),
    per RECIPES.md: whether they differ between layers and between steps; both operands of a GEMM
    always share one (the product is unchanged), and a run seed changes them all."""
    import torch.nn as nn

    from scaling.linear import QLinear, convert
    from scaling.recipes import GEMMS
    from scaling.transforms import signs_for

    def vectors(recipe, run_seed, step):
        model = nn.Module()
        model.blocks = nn.ModuleList([nn.Sequential(nn.Linear(128, 128, bias=False)) for _ in range(3)])
        layers = [m for m in convert(model, recipe, seed=run_seed).modules() if isinstance(m, QLinear)]
        out = []
        for layer in layers:
            rows = dict(zip(OPERANDS, layer.step_seeds(step)))
            per_op = {o: tuple(signs_for(recipe.spec(o).signs, recipe.spec(o).transform, rows[o][1]).tolist())
                      for o in OPERANDS if recipe.spec(o) is not None and recipe.spec(o).signs != "ones"}
            for a, b in GEMMS.values():
                if a in per_op:
                    assert per_op[a] == per_op[b], f"{name}: {a} and {b} must share their signs"
            out.append(per_op)
        return out

    recipe = get_recipe(name)
    step5, step6, other_run = vectors(recipe, 3, 5), vectors(recipe, 3, 6), vectors(recipe, 4, 5)
    ops = list(step5[0])
    assert ops, f"{name} has random signs"
    for o in ops:
        assert (len({layer[o] for layer in step5}) == len(step5)) == across_layers, o
        assert (len({layer[o] for layer in step5}) == 1) == (not across_layers), o
        assert all((a[o] != b[o]) == across_steps for a, b in zip(step5, step6)), o
        assert all(a[o] != b[o] for a, b in zip(step5, other_run)), o


def test_a_sweep_spec_and_a_recipe_file_given_for_each_other_say_which_they_are(tmp_path, capsys):
    """README shows both as TOML: a sweep spec given to `recipes` read "unknown key(s) data, grid (did you mean
    wgrad?)", and a recipe file given to `sweep plan` "base: unknown key"; each names what the file is instead."""
    spec = tmp_path / "study.toml"
    spec.write_text('name = "study"\ndata = "builtin"\n[grid]\nfamily = "nanochat"\nsize = "0.5M"\nrecipe = "bf16"\n'
                    'tokens = 4096\n')
    err = refused(["recipes", str(spec)], capsys, "is a sweep spec (it has a [grid] table), not a recipe file",
                  "scaling sweep plan")
    assert "did you mean" not in err
    recipe = tmp_path / "mine.toml"
    recipe.write_text('name = "mine"\nbase = "nvfp4"\n[wgrad.dy]\nrounding = "nearest"\n')
    refused(["sweep", "plan", str(recipe)], capsys, f"{recipe} is a recipe file (its base, wgrad), not a sweep spec",
            f"scaling recipes {recipe}")
