"""Sweep specs take recipe .toml files, and refuse (family, size, recipe) pairs that cannot run."""

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


def test_incompatible_size_and_recipe_is_refused(tmp_path):
    with pytest.raises(UserError, match="nanochat 0.5M.*multiple of 128"):
        _load(tmp_path, '["0.5M", "1M"]', '["bf16", "quartet2"]')
    _load(tmp_path, '["1M"]', '["bf16", "quartet2"]')
