"""Results: TensorBoard runs (or their JSON summaries) turned into curves, tables and aggregates.

``rl-lightning plot`` (``plot_cli``) reads runs (``runs``: folders of event files, read with TensorBoard's own
loader in ``events``, or the compact per-run JSON of ``summary``), groups them by config or by a user's label,
aligns seeds on a common grid with a bootstrap band (``curves``), draws them (``draw``), tabulates final values and
runtimes (``table``) and aggregates normalised scores across tasks with rliable (``aggregate``). matplotlib and
rliable come with the ``plot`` extra and are imported only when a figure or an aggregate is made.
"""
