"""Sweeps: a TOML grid of runs (spec), priced (plan, by cost's rules), launched on SLURM or locally (launch),
read back (store); what this machine offers a launch, its GPUs and CPU threads (machine), which plan and launch share.

    from sweeps.spec import load_spec
    from sweeps.launch import launch
    from sweeps.store import status, collect

    spec = load_spec("sweeps/demo.toml", ["grid.seed=[0,1]"])
    launch(spec, executor="local")           # or "slurm"
    collect("runs/demo")                     # polars DataFrame, one row per finished run
"""
