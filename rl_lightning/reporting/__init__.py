"""What a run reports through Lightning: scalars written at an env step (the x-axis of every curve), and the
Lightning notices that this package's design triggers and no user can act on, silenced.

Nothing here imports the rest of the package.
"""
