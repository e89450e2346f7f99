"""A public server's boundaries: what a browser may change, compute budgets, health, bounded logs, memory."""


def install() -> None:
    """Once per served process: bounded logs and the compute budget. (The health route is a Panel plugin:
    `panel serve app.py --plugins explorable.server.health`.)"""
    from explorable.server import budget, log_limits

    log_limits.install()
    budget.install()
