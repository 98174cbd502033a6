"""Sweep specs take recipe .toml files, and refuse (family, size, recipe) pairs that cannot run."""

import re
import textwrap

import pytest

from scaling.errors import UserError
from sweeps.spec import load_spec

SPEC = """
name = "r"
data = "builtin"
[grid]
family = "nanochat"
size = {size}
recipe = {recipe}
tokens = 4096
"""


def _load(tmp_path, size, recipe):
    p = tmp_path / "spec.toml"
    p.write_text(textwrap.dedent(SPEC.format(size=size, recipe=recipe)))
    return load_spec(p, [])


def test_recipe_toml_in_grid(tmp_path):
    r = tmp_path / "mine.toml"
    r.write_text('name = "mine"\nbase = "ufp4"\n[wgrad]\ndy = "bf16"\nx = "bf16"\n')
    spec = _load(tmp_path, '"1M"', f'["bf16", "{r}"]')
    assert sorted(run.recipe for run in spec.runs()) == sorted(["bf16", str(r.resolve())])
    r.write_text('name = "mine"\n[fprop.x]\nrounding = "up"\n')
    with pytest.raises(UserError, match=r"grid.recipe\[1\]: .*fprop.x"):
        _load(tmp_path, '"1M"', f'["bf16", "{r}"]')


def test_runs_read_a_recipe_file_once(tmp_path, monkeypatch):
    """`runs` checks every run's tokens against its recipe, read once per recipe (not once per run)."""
    from scaling.recipes import Recipe

    r = tmp_path / "mine.toml"
    r.write_text('name = "mine"\nbase = "nvfp4"\n')
    (tmp_path / "spec.toml").write_text(textwrap.dedent(SPEC.format(size='"1M"', recipe=f'["{r}"]')))
    spec = load_spec(tmp_path / "spec.toml", ["grid.seed=[0, 1, 2]"])
    reads = []
    from_toml = Recipe.from_toml.__func__
    monkeypatch.setattr(Recipe, "from_toml", classmethod(lambda cls, path: reads.append(path) or from_toml(cls, path)))
    assert len(spec.runs()) == 3 and len(reads) == 1

def test_incompatible_size_and_recipe_is_refused(tmp_path):
    with pytest.raises(UserError, match="nanochat 0.5M.*multiple of 128"):
        _load(tmp_path, '["0.5M", "1M"]', '["bf16", "quartet2"]')
    _load(tmp_path, '["1M"]', '["bf16", "quartet2"]')


def test_a_recipe_whose_wgrad_blocks_do_not_divide_the_micro_batch_is_refused_before_any_run(tmp_path, capsys):
    """wgrad's K is a micro-batch's token count (1M, 4096 tokens: 1024); each run would stop at its first backward,
    after its folder was made, naming only "a dimension of size 1024". Refused at plan and launch, as the spec's
    other errors are: by its grid entry, the grid point as `point_label` names it, the recipe file, the operand and
    the fix (it said `train: recipe 'wg' cannot ... (run {'family': 'nanochat', ...})`, a Python dict; audit)."""
    from scaling.cli import main

    r = tmp_path / "wg.toml"
    r.write_text('name = "wg"\nbase = "mxfp4"\n[wgrad.dy]\nblock = [1, 2048]\n[wgrad.x]\nblock = [1, 2048]\n')
    spec = _load(tmp_path, '"1M"', f'["bf16", "{r}"]')
    with pytest.raises(UserError) as err:
        spec.runs()
    assert str(err.value) == (
        f"grid.recipe[1]: recipe file {r} cannot quantize the micro-batches of the run nanochat 1M wg tokens=4096 seed=0: "
        "its wgrad.dy (MX e2m1 1x2048 e8m0) needs their token count, micro_batch_size x seq_len, to be a multiple of "
        "2048, and it is 4 x 256 = 1024; this run's batch of 4 sequences (1024 tokens) holds no such micro-batch: set "
        "train.batch_size and train.micro_batch_size (or train.seq_len) so that it does, or change wgrad.dy in "
        f"{r} to blocks that divide 1024")
    for verb in ("plan", "launch"):  # (launch: before its sweep folder is made)
        assert main(["sweep", verb, str(tmp_path / "spec.toml"), "--sweep-dir" if verb == "launch" else "--json",
                     *([str(tmp_path / "sweep")] if verb == "launch" else [])]) == 2
        assert capsys.readouterr().err == f"error: {err.value}\n"
    assert not (tmp_path / "sweep").exists()
    # where a micro_batch_size fits this run's batch, the message names it, and it does fit
    fix = ("train.seq_len=64", "train.batch_size=64", "train.micro_batch_size=16", "grid.tokens=8192")
    with pytest.raises(UserError, match=r"it is 16 x 64 = 1024; set train.micro_batch_size = 32 \(32 x 64 = 2048; it "
                                        r"divides this run's batch of 64 sequences\), or change wgrad.dy in "):
        load_spec(tmp_path / "spec.toml", list(fix)).runs()
    assert len(load_spec(tmp_path / "spec.toml", [*fix, "train.micro_batch_size=32"]).runs()) == 2


def test_train_refuses_such_a_recipe_before_making_the_run_folder(tmp_path):
    from scaling.config import RunConfig
    from scaling.train import train

    r = tmp_path / "wg.toml"
    r.write_text('name = "wg"\nbase = "mxfp4"\n[wgrad.dy]\nblock = [1, 2048]\n[wgrad.x]\nblock = [1, 2048]\n')
    with pytest.raises(UserError, match=r"\(1024 tokens each\).*--micro-batch-size, --seq-len"):
        train(RunConfig(family="nanochat", size="1M", recipe=str(r), tokens=4096), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_a_recipe_path_relative_to_the_spec_not_the_working_folder_says_so(tmp_path, monkeypatch):
    (tmp_path / "study" / "recipes").mkdir(parents=True)
    (tmp_path / "study" / "recipes" / "mine.toml").write_text('name = "mine"\nbase = "nvfp4"\n')
    spec = tmp_path / "study" / "spec.toml"
    spec.write_text(textwrap.dedent(SPEC.format(size='"1M"', recipe='["recipes/mine.toml"]')))
    monkeypatch.chdir(tmp_path)  # it said only "recipe file .../recipes/mine.toml does not exist"
    with pytest.raises(UserError, match=r"relative to it, not to the spec: run from .*study or write the path as "):
        load_spec(spec, [])
    monkeypatch.chdir(tmp_path / "study")
    assert load_spec(spec, []).recipe == (str(tmp_path / "study" / "recipes" / "mine.toml"),)


def test_a_recipe_files_runs_are_named_by_its_content_not_its_path(tmp_path):
    """The same file at another path (moved, or a checkout elsewhere) keeps its runs' ids; an edit
    makes another run."""
    from scaling.config import RunConfig

    text = 'name = "mine"\nbase = "ufp4"\n[wgrad]\ndy = "bf16"\nx = "bf16"\n'
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "mine.toml").write_text(text)
    (tmp_path / "b" / "mine.toml").write_text(text)
    run = lambda path: RunConfig(family="nanochat", size="1M", recipe=str(path), tokens=4096 * 8).run_id  # noqa: E731
    assert run(tmp_path / "a" / "mine.toml") == run(tmp_path / "b" / "mine.toml")
    (tmp_path / "b" / "mine.toml").write_text(text.replace('dy = "bf16"\n', ""))
    assert run(tmp_path / "a" / "mine.toml") != run(tmp_path / "b" / "mine.toml")


def test_two_recipe_files_of_one_name_must_be_one_recipe(tmp_path):
    """Fits and reports group runs by recipe name: two different files of one name in a grid are
    refused (two copies of one file are one recipe listed twice, refused too:
    test_a_recipe_listed_twice_or_a_copy_of_one_is_refused)."""
    text = 'name = "mine"\nbase = "ufp4"\nhigh_precision_blocks = [0]\n'
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "mine.toml").write_text(text)
    a, b = tmp_path / "a" / "mine.toml", tmp_path / "b" / "mine.toml"
    b.write_text(text.replace("[0]", "[0, -1]"))
    with pytest.raises(UserError, match=rf"grid.recipe: {a} and {b} are both named 'mine' but differ; .* a name of its own"):
        _load(tmp_path, '"1M"', f'["{a}", "{b}"]')


def test_collect_refuses_runs_of_one_recipe_name_under_two_versions_of_its_file(tmp_path):
    """A recipe file edited between two launches: the sweep holds runs of both versions under one name,
    which a table, a fit and a report would pool. collect (and so report and demo) names them."""
    import json

    from sweeps.store import collect

    sweep = tmp_path / "sweep"
    for i, hp in enumerate(("[0]", "[0, -1]", "[0, -1]")):
        d = sweep / f"run{i}"
        d.mkdir(parents=True)
        (d / "recipe.toml").write_text(f'name = "mine"\nbase = "ufp4"\nhigh_precision_blocks = {hp}\n')
        (d / "result.json").write_text(json.dumps({"run_id": d.name, "recipe": "mine", "status": "completed",
                                                   "val_loss": 4.0 + i, "recipe_file": "/x/mine.toml"}))
    with pytest.raises(UserError, match=r"recipe 'mine' were trained under 2 different versions of its file "
                                        r"\(their recipe.toml copies differ\): run0 \(1 run\); run1, run2 \(2 runs\); move"):
        collect(sweep)
    (sweep / "run0" / "recipe.toml").write_text((sweep / "run1" / "recipe.toml").read_text())
    assert collect(sweep).height == 3


def test_plan_and_status_name_a_recipe_file_by_its_name(tmp_path):
    """As collect, fits and reports do (not by its absolute path); status reads the run folder's copy,
    so a file moved or edited since still gives the name the run trained under."""
    from sweeps.plan import plan_rows
    from sweeps.store import recipe_label

    r = tmp_path / "mine_file.toml"
    r.write_text('name = "mine"\nbase = "ufp4"\n')
    spec = _load(tmp_path, '"1M"', f'["bf16", "{r}"]')
    assert sorted(row["recipe"] for row in plan_rows(spec)) == ["bf16", "mine"]
    copy = tmp_path / "copy.toml"
    copy.write_text('name = "mine_then"\n')
    assert recipe_label(str(r), copy) == "mine_then" and recipe_label(str(r)) == "mine"
    assert recipe_label(str(tmp_path / "gone.toml")) == str(tmp_path / "gone.toml") and recipe_label("nvfp4") == "nvfp4"


def test_a_run_whose_recipe_file_moved_resumes_in_its_folder(tmp_path):
    """The run's config.json names the old path; its folder's recipe.toml copy gives the id the run
    started under, which the moved file's content gives again."""
    import shutil

    from scaling.config import RunConfig
    from scaling.train import check_run_dir, prepare_run_dir

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    old = tmp_path / "a" / "mine.toml"
    old.write_text('name = "mine"\nbase = "ufp4"\n')
    config = lambda path: RunConfig(family="nanochat", size="1M", recipe=str(path), tokens=4096 * 8)  # noqa: E731
    run_dir = tmp_path / "runs" / config(old).run_id
    prepare_run_dir(config(old).resolved(), run_dir)
    shutil.move(old, tmp_path / "b" / "mine.toml")
    moved = config(tmp_path / "b" / "mine.toml")
    assert moved.run_id == run_dir.name
    check_run_dir(moved, run_dir)  # the same run: no refusal
    (tmp_path / "b" / "mine.toml").write_text('name = "mine"\nbase = "nvfp4"\n')
    with pytest.raises(UserError, match=r"holds a different run \(\w+, not \w+: the recipe file's content\)"):
        check_run_dir(config(tmp_path / "b" / "mine.toml"), run_dir)
    # relaunched from its config.json, which names the path it started at: the copy is the way on
    with pytest.raises(UserError, match=f"the recipe file {old} this run started with no longer exists; "
                                        f"{run_dir / 'recipe.toml'} is its copy: pass --recipe"):
        check_run_dir(RunConfig.from_json(run_dir / "config.json"), run_dir)
    check_run_dir(config(run_dir / "recipe.toml"), run_dir)  # the same run: no refusal


def test_a_run_under_a_recipe_built_on_a_recipe_file_is_named_by_both_files_content(tmp_path):
    """A run's id hashes a recipe file's content, not its path; for a file built on another file (`base`), the
    content of both: an edit to the base file (a comment too, as to a lone file) is another run, and the two files
    moved together are the same run. The run folder keeps one self-contained recipe.toml, which gives the run's id
    and recipe without the base file; `train` and a sweep's `launch` refuse the edited base as an edited file."""
    import shutil

    from scaling.recipes import Recipe
    from scaling.train import check_run_dir, prepare_run_dir
    from sweeps.launch import check_same_spec
    from sweeps.store import _config_run_id

    (tmp_path / "a" / "base").mkdir(parents=True)
    base = tmp_path / "a" / "base" / "wgrad_bf16.toml"
    base.write_text('name = "wgrad_bf16"\nbase = "ufp4"\n[wgrad]\ndy = "bf16"\nx = "bf16"\n')
    mine = tmp_path / "a" / "mine.toml"
    mine.write_text('name = "mine"\nbase = "base/wgrad_bf16.toml"\nhigh_precision_blocks = [0]\n')
    run = lambda path: _load(tmp_path, '"1M"', f'"{path}"').runs()[0]  # noqa: E731
    by_id = lambda c: {c.run_id: c}  # noqa: E731 (check_same_spec's runs)
    started = run(mine)
    first = started.run_id  # (a config's run_id hashes the file as it is when asked)
    sweep = tmp_path / "sweep"
    run_dir = sweep / first
    prepare_run_dir(started.resolved(), run_dir)
    copy = run_dir / "recipe.toml"
    assert _config_run_id(run_dir) == first  # (as status reads it: from the copy)
    assert Recipe.from_toml(copy).wgrad_x is None and Recipe.from_toml(copy).high_precision_blocks == (0,)
    check_run_dir(started, run_dir)
    check_same_spec({started.run_id: started}, sweep)

    text = base.read_text()
    base.write_text("# a comment only\n" + text)  # the base file edited: another run
    edited = run(mine)
    assert edited.run_id != first
    # the edited file named (the base, not the file the spec names), as train and launch both say it
    edited_base = f"the base file {base} of {mine} ({mine} -> {base}) has changed since"
    with pytest.raises(UserError, match=rf"^{re.escape(edited_base)} the run in {run_dir} started"):
        check_run_dir(edited, run_dir)
    with pytest.raises(UserError, match=re.escape(f"under an earlier version of its recipe: {edited_base} that run")):
        check_same_spec({edited.run_id: edited}, sweep)
    mine.write_text(mine.read_text() + "# and the recipe file\n")
    with pytest.raises(UserError, match=re.escape(f"the recipe file {mine} and its base file {base} ({mine} -> {base}) "
                                                  "has changed since")):
        check_same_spec(by_id(run(mine)), sweep)
    base.write_text(text)
    with pytest.raises(UserError, match=re.escape(f"under an earlier version of its recipe: the recipe file {mine} has "
                                                  "changed since that run started")):
        check_same_spec(by_id(run(mine)), sweep)
    mine.write_text(mine.read_text().replace("# and the recipe file\n", ""))
    check_same_spec(by_id(run(mine)), sweep)

    base.write_text(text)
    shutil.move(tmp_path / "a", tmp_path / "b")  # both files moved (a checkout elsewhere): the same run
    assert run(tmp_path / "b" / "mine.toml").run_id == first


def test_a_launch_refuses_a_recipe_file_edited_since_its_runs_started(tmp_path):
    """The recipe file edited between launches: the relaunch trained the new version beside the old
    runs (collect then refused the pair); it stops before anything runs, naming the file's content."""
    from scaling.data import read_meta
    from scaling.run_data import check_run_data, resolve_data_dir
    from sweeps.launch import check_same_spec

    r = tmp_path / "mine.toml"
    r.write_text('name = "mine"\nbase = "bf16"\n')
    (c,) = _load(tmp_path, '"0.5M"', f'"{r}"').runs()
    run_dir = tmp_path / "sweep" / c.run_id
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(c.resolved().to_json())
    (run_dir / "recipe.toml").write_bytes(r.read_bytes())
    # the corpus it trains on, recorded as train records it when the run starts (data.json): with it, the edit
    # below read as the built-in corpus "moved" to builtin, "set the spec's data back to builtin" (a user's walk)
    check_run_data(run_dir, read_meta(resolve_data_dir(c.resolved())), c.data)
    assert (run_dir / "data.json").is_file()
    check_same_spec({c.run_id: c}, tmp_path / "sweep")  # the same run: nothing to say
    r.write_text('name = "mine"\nbase = "bf16"\nhigh_precision_blocks = [0]\n')
    (c,) = _load(tmp_path, '"0.5M"', f'"{r}"').runs()
    with pytest.raises(UserError, match=rf"holds run {run_dir.name} at this spec's grid point nanochat 0.5M mine "
                                        rf"tokens=4096 seed=0 under an earlier version of its recipe: the recipe file "
                                        rf"{r} has changed since that run started"):
        check_same_spec({c.run_id: c}, tmp_path / "sweep")


def test_plan_prices_a_recipe_file_by_the_rows_of_its_name(tmp_path):
    """`scaling bench --recipes path/mine.toml` keys its rows by the recipe's name ("mine"), and plan
    finds a run's speed by that name: it looked the run's absolute path up, which matched no row."""
    import json

    from sweeps.plan import plan_rows, plan_speeds

    r = tmp_path / "mine_file.toml"
    r.write_text('name = "mine"\nbase = "ufp4"\n')
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"device": "test", "train": [
        {"recipe": "mine", "family": "nanochat", "size": "1M", "ratio_vs_bf16": 0.5}]}))
    spec = _load(tmp_path, '"1M"', f'["bf16", "{r}"]')
    rows = {row["recipe"]: row for row in plan_rows(spec, speeds=plan_speeds(str(bench), "gpu"))}
    assert rows["mine"]["vs_bf16"] == 0.5 and not rows["mine"]["speed_note"], rows["mine"]
    assert rows["mine"]["gpu_hours"] == pytest.approx(2 * rows["bf16"]["gpu_hours"])


def test_a_recipe_listed_twice_or_a_copy_of_one_is_refused(tmp_path):
    """Two files of one name and content are one recipe (their runs share ids): the grid kept the first and ran
    one run per grid point, as for bf16 listed twice or one file by two paths, without a word (audit). Each is
    refused, naming both entries as written; one listed once is one recipe."""
    text = 'name = "mine"\nbase = "nvfp4"\n'
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "mine.toml").write_text(text)
    a, b = tmp_path / "a" / "mine.toml", tmp_path / "b" / "mine.toml"
    with pytest.raises(UserError, match=rf"^grid.recipe\[2\]: '{b}' is a copy of grid.recipe\[1\] = '{a}' \(recipe "
                                        r"'mine', the same content: its runs are one\); list each recipe once$"):
        _load(tmp_path, '"1M"', f'["bf16", "{a}", "{b}"]')
    with pytest.raises(UserError, match=rf"^grid.recipe\[1\]: '{tmp_path}/a/../a/mine.toml' repeats grid.recipe\[0\] = "
                                        rf"'{a}' \(both '{a}'\); list each value once"):
        _load(tmp_path, '"1M"', f'["{a}", "{tmp_path}/a/../a/mine.toml"]')
    with pytest.raises(UserError, match=r"^grid.recipe\[3\]: 'bf16' repeats grid.recipe\[0\] = 'bf16'; list each"):
        _load(tmp_path, '"1M"', f'["bf16", "{a}", "nvfp4", "bf16"]')
    spec = _load(tmp_path, '"1M"', f'["bf16", "{a}"]')
    assert spec.recipe == ("bf16", str(a)) and len(spec.runs()) == 2


