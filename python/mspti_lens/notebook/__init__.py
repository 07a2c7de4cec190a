"""Everything Jupyter-facing: the ``%mspti`` magics, the panel model, its ipywidgets view, the
panel of a recorded run (:mod:`.runpanel`), the display helpers and the one table formatter
(:mod:`.tables`). Holds no statistics: it shows Snapshots, Runs and their frames.

``%load_ext mspti_lens`` (through :func:`mspti_lens.load_ipython_extension`) loads
:mod:`mspti_lens.notebook.magics`.
"""
