"""Processes and threads of a run: child processes that die with their parent, the fork server they start from,
stop requests (SIGTERM, Ctrl+C), and the learner's waits and threads lent to background work and idle actors.

Nothing here imports the rest of the package, so every layer may use it.
"""
