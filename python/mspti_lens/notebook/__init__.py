"""Everything Jupyter-facing: the ``%mspti`` magics, the panel model, its ipywidgets view and the
display helpers. Holds no statistics: it shows Snapshots and their frames.

``%load_ext mspti_lens`` (through :func:`mspti_lens.load_ipython_extension`) loads
:mod:`mspti_lens.notebook.magics`.
"""
