"""`envkit launch`: one job description (job.Job), one renderer per engine (engines.py).

Each engine module turns a Job into a plan.Plan (files and the engine client's
commands); nothing here schedules anything itself. The package imports nothing, so
registering the `launch` command costs `envkit render` no time.
"""
