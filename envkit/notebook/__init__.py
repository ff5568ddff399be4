"""Notebooks: each experiment as a Colab or Kaggle notebook that runs on its target's lock.

The platforms' data (envkit/data/notebook_platforms.yaml) is read by
envkit.project.notebook_platforms, below this package: config and lock need it too.
``builder`` renders a notebook (nbformat 4) from an experiment, a notebook target
and its lock; ``runtime`` is the code those notebooks embed and run (standard
library only: it runs in the platform's kernel and imports no installed envkit; only its report step
imports envkit's report modules, from the copy the notebook embeds);
``committed`` keeps notebooks/ in step with envkit.yaml.

Import-light on purpose: `envkit render` must not pay for what other commands need.
"""
